package imagebuild

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vmpod"
)

// Options say what to build.
type Options struct {
	// Module is the directory of vmop's go.mod; the binaries are built
	// from its cmd/.
	Module string
	// Version is the version the binaries report and the images' tag.
	Version string
	// Revision is the commit built, for the images' labels.
	Revision string
	// Created is the time of that commit: the images' creation time and
	// the time of every file of theirs that is newer.
	Created time.Time
	// Registry names the images; empty means version.Registry.
	Registry string
	// RunnerRoot is the vm-runner image's root file system, made by
	// hack/runner-root.sh.
	RunnerRoot string
	// Out is where the archives are written, one <name>.tar each.
	Out string
}

// Built is one image written.
type Built struct {
	Name    string
	Ref     name.Tag
	Archive string
	Image   v1.Image
}

// nonRoot is the user of the images that need no privileges, as
// distroless names it.
const nonRoot = "65532:65532"

// root is the user of vm-node, the privileged node agent.
const root = "0:0"

// image is how one of vmop's images is made.
type image struct {
	name string
	// pkg is the Go main package of the module that the image runs.
	pkg string
	// at is where the binary goes in the image.
	at          string
	user        string
	description string
	// base is the root file system under the binary, if any.
	base func(o Options, work string) (v1.Layer, error)
	// dirs are empty directories the image provides as mount points.
	dirs []string
	// helpers are further programs of the module beside the binary: by
	// package, at the path in the image.
	helpers []helper
}

// helper is a program of the module that an image's binary runs.
type helper struct{ pkg, at string }

var images = []image{
	{
		name: version.RunnerImage, pkg: "./cmd/vm-runner", at: "usr/local/bin/vm-runner",
		description: "vm-runner with qemu, OVMF and swtpm from Debian 13: runs one VM in its pod",
		base: func(o Options, work string) (v1.Layer, error) {
			if o.RunnerRoot == "" {
				return nil, fmt.Errorf("no root file system for %s (hack/runner-root.sh makes it)", version.RunnerImage)
			}
			return DirLayer(work, o.RunnerRoot, o.Created)
		},
		dirs: []string{vmpod.ConfigDir, vmpod.DataDir, vmpod.ImageRepositoryDir},
		// Found beside vm-runner (runner.ExpandTemplate).
		helpers: []helper{{pkg: "./cmd/vm-runner-template", at: "usr/local/bin/vm-runner-template"}},
	},
	{
		name: version.OperatorImage, pkg: "./cmd/vm-operator", at: "vm-operator", user: nonRoot,
		description: "vm-operator: renders VirtualMachines into StatefulSets and reports their status",
	},
	{
		name: version.NodeImage, pkg: "./cmd/vm-node", at: "vm-node", user: root,
		description: "vm-node: vmop's node agent: devices and pod networks for unprivileged VM pods",
	},
	{
		name: version.FunctionImage, pkg: "./cmd/kubectl-vm", at: "kubectl-vm", user: nonRoot,
		description: "kubectl-vm as a KRM function: replaces VirtualMachines by their rendered objects",
	},
}

// Build builds every image into o.Out.
func Build(o Options) ([]Built, error) {
	var built []Built
	err := inWork(o, func(work string) error {
		for _, im := range images {
			b, err := im.build(o, work)
			if err != nil {
				return fmt.Errorf("%s: %w", im.name, err)
			}
			built = append(built, b)
		}
		return nil
	})
	return built, err
}

func (im image) build(o Options, work string) (Built, error) {
	v := o.Version
	if v == "" {
		v = "devel"
	}
	tag := version.Tag(v)
	ref, err := name.NewTag(version.Ref(o.Registry, im.name, tag))
	if err != nil {
		return Built{}, err
	}
	bin, err := goBuild(o.Module, v, im.pkg, work)
	if err != nil {
		return Built{}, err
	}
	var base v1.Layer
	if im.base != nil {
		if base, err = im.base(o, work); err != nil {
			return Built{}, err
		}
	}
	files := []File{{Path: im.at, Mode: 0o755, Source: bin}}
	for _, h := range im.helpers {
		hb, err := goBuild(o.Module, v, h.pkg, work)
		if err != nil {
			return Built{}, err
		}
		files = append(files, File{Path: h.at, Mode: 0o755, Source: hb})
	}
	for _, d := range im.dirs {
		files = append(files, File{Path: d, Mode: fs.ModeDir | 0o755})
	}
	return assemble(o, work, parts{
		name: im.name, ref: ref, base: base, files: files,
		config: Config{
			Entrypoint: []string{"/" + im.at},
			Env:        []string{debianPath},
			User:       im.user,
			Labels:     labels(o, im.name, im.description, "https://github.com/vmop/vmop", tag),
		},
	})
}

// debianPath is the PATH of the images: Debian's default, which also
// finds binaries in /usr/local/bin.
const debianPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"

// labels are an image's OCI annotations.
func labels(o Options, title, description, source, tag string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       title,
		"org.opencontainers.image.description": description,
		"org.opencontainers.image.version":     tag,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.source":      source,
		"org.opencontainers.image.created":     o.Created.UTC().Format(time.RFC3339),
	}
}

// parts are what an image is made of once its binary exists: vmop's
// images (built from the module) and Prebuilt's differ only in that step.
type parts struct {
	// name names the archive, <name>.tar in o.Out.
	name string
	ref  name.Tag
	// base is a layer under files; nil for none.
	base  v1.Layer
	files []File
	// config is what the image runs.
	config Config
}

// assemble writes the image of p into o.Out, its layers in work.
func assemble(o Options, work string, p parts) (Built, error) {
	var layers []v1.Layer
	if p.base != nil {
		layers = append(layers, p.base)
	}
	if len(p.files) > 0 {
		l, err := FilesLayer(work, p.files, o.Created)
		if err != nil {
			return Built{}, err
		}
		layers = append(layers, l)
	}
	img, err := Image(layers, p.config, o.Created)
	if err != nil {
		return Built{}, err
	}
	archive := filepath.Join(o.Out, p.name+".tar")
	if err := WriteArchive(archive, p.ref, img); err != nil {
		return Built{}, err
	}
	return Built{Name: p.name, Ref: p.ref, Archive: archive, Image: img}, nil
}

// DevOptions are the options that build the images of the module that
// holds the working directory as version "devel", the version of binaries
// built without flags: what tests and make cluster run, so that what a
// plugin of the tree renders names these images. They go to out.
func DevOptions(out string) (Options, error) {
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return Options{}, fmt.Errorf("go env GOMOD: %w", err)
	}
	o := Options{
		Module:  filepath.Dir(strings.TrimSpace(string(mod))),
		Version: "devel",
		Created: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC),
		Out:     out,
	}
	o.RunnerRoot, err = RunnerRoot(o.Module)
	return o, err
}

// RunnerRoot returns the vm-runner image's root file system, which
// hack/runner-root.sh of the module at module builds once and caches.
func RunnerRoot(module string) (string, error) {
	cmd := exec.Command(filepath.Join(module, "hack", "runner-root.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/runner-root.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// RunnerQemuScript starts the runner image's qemu on a host whose own
// qemu differs, with the image's loader, libraries, modules and firmware;
// ROOT stands for RunnerRoot's directory. Error messages keep qemu's own
// name.
const RunnerQemuScript = `#!/bin/sh
R='ROOT'
QEMU_MODULE_DIR="$R/usr/lib/x86_64-linux-gnu/qemu" exec "$R/lib64/ld-linux-x86-64.so.2" \
	--library-path "$R/usr/lib/x86_64-linux-gnu" --argv0 qemu-system-x86_64 "$R/usr/bin/qemu-system-x86_64" \
	-L "$R/usr/share/qemu" -L "$R/usr/share/seabios" -L "$R/usr/lib/ipxe/qemu" "$@"
`

// Program builds an image of one more Go program of the module, static
// and unprivileged like the operator's: pkg is its main package (e.g. a
// test's helper), name the image's, its binary /<name>.
func Program(o Options, name, pkg string) (Built, error) {
	var b Built
	err := inWork(o, func(work string) (err error) {
		b, err = image{name: name, pkg: pkg, at: name, user: nonRoot, description: name}.build(o, work)
		return err
	})
	return b, err
}

// inWork calls build with a new working directory in o.Out (made if
// missing) for the layers, removed after.
func inWork(o Options, build func(work string) error) error {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(o.Out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	return build(work)
}

// Tags are the build tags of vmop's binaries: grpcnotrace leaves
// grpc's request tracing (golang.org/x/net/trace, and html/template with
// it) out of vm-node, a fifth of its size, which is most of its memory.
const Tags = "grpcnotrace"

// goBuild builds the main package pkg statically for linux/amd64 into
// work and returns its path. -trimpath and the commit's build info make it
// the same on every machine.
func goBuild(module, v, pkg, work string) (string, error) {
	out := filepath.Join(work, path.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-tags", Tags,
		"-ldflags", "-s -w -X github.com/vmop/vmop/pkg/version.Version="+v,
		"-o", out, pkg)
	cmd.Dir = module
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}
