package imagebuild

import (
	"fmt"
	"io/fs"
	"maps"
	"slices"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// PrebuiltImage is an image of a binary built elsewhere, such as a third
// party's controller that tests run, or of a root file system alone.
type PrebuiltImage struct {
	// Name names the archive, <Name>.tar in Options.Out.
	Name string
	// Ref is the image's reference, e.g. vmop.test/argocd:v3.1.16.
	Ref string
	// Binary is the file put at At (a path in the image, without a
	// leading slash), mode 0755, owned by root; empty for none.
	Binary, At string
	// Root is a directory whose tree is a layer under the binary, with
	// its owners kept (DirLayer); empty for none.
	Root string
	// Symlinks maps paths in the image to their targets, e.g. the argv[0]
	// names of a multi-call binary.
	Symlinks map[string]string
	// Entrypoint is what the image runs; empty leaves it to the pod's
	// command.
	Entrypoint []string
	// Env is the environment beside PATH, which is Debian's default.
	Env []string
	// User is a numeric "uid:gid"; empty means root.
	User string
	// WorkingDir is where the entrypoint starts; empty means /.
	WorkingDir string
	// Description and Source (a URL) label the image.
	Description, Source string
}

// Prebuilt writes the image spec describes into o.Out and returns it as
// read from its archive. Of o, only Out, Created and Revision count.
func Prebuilt(o Options, spec PrebuiltImage) (Built, error) {
	ref, err := name.NewTag(spec.Ref)
	if err != nil {
		return Built{}, err
	}
	var files []File
	if spec.Binary != "" {
		files = append(files, File{Path: spec.At, Mode: 0o755, Source: spec.Binary})
	}
	for _, p := range slices.Sorted(maps.Keys(spec.Symlinks)) {
		files = append(files, File{Path: p, Mode: fs.ModeSymlink | 0o777, Data: []byte(spec.Symlinks[p])})
	}
	var b Built
	err = inWork(o, func(work string) error {
		var base v1.Layer
		if spec.Root != "" {
			if base, err = DirLayer(work, spec.Root, o.Created); err != nil {
				return err
			}
		}
		b, err = assemble(o, work, parts{
			name: spec.Name, ref: ref, base: base, files: files,
			config: Config{
				Entrypoint: spec.Entrypoint,
				Env:        append([]string{debianPath}, spec.Env...),
				User:       spec.User,
				WorkingDir: spec.WorkingDir,
				Labels:     labels(o, spec.Name, spec.Description, spec.Source, ref.TagStr()),
			},
		})
		return err
	})
	if err == nil {
		// The layers' files went with the work directory: the image
		// that callers read (configs, files) is the archive's.
		b.Image, err = ReadArchive(b.Archive, ref)
	}
	if err != nil {
		return Built{}, fmt.Errorf("%s: %w", spec.Name, err)
	}
	return b, nil
}
