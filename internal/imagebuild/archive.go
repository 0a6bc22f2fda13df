package imagebuild

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Config is what an image runs.
type Config struct {
	Entrypoint []string
	Env        []string
	// User is a numeric "uid:gid"; empty means root.
	User string
	// WorkingDir is where the entrypoint starts; empty means /.
	WorkingDir string
	Labels     map[string]string
}

// Image is an OCI image (manifest and config of OCI media types) for
// linux/amd64 of layers, created at created.
func Image(layers []v1.Layer, cfg Config, created time.Time) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "vmop imagebuild"}})
		if err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS = "amd64", "linux"
	cf.Created = v1.Time{Time: created}
	wd := cfg.WorkingDir
	if wd == "" {
		wd = "/"
	}
	cf.Config = v1.Config{
		Entrypoint: cfg.Entrypoint,
		Env:        cfg.Env,
		User:       cfg.User,
		WorkingDir: wd,
		Labels:     cfg.Labels,
	}
	return mutate.ConfigFile(img, cf)
}

// WriteArchive writes img as a tar that every common loader takes: an OCI
// image layout (ctr images import, podman load, skopeo oci-archive:,
// Docker 25+) that also holds Docker's manifest.json (docker load before
// 25, crane push), as docker save writes it since Docker 25. The image is
// named ref in both.
func WriteArchive(file string, ref name.Tag, img v1.Image) error {
	dir, err := os.MkdirTemp(filepath.Dir(file), ".archive-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(filepath.Join(dir, "root"), empty.Index)
	if err != nil {
		return err
	}
	err = lp.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	}))
	if err != nil {
		return err
	}
	cfg, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	desc := tarball.Descriptor{Config: blobPath(cfg), RepoTags: []string{ref.Name()}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		desc.Layers = append(desc.Layers, blobPath(d))
	}
	m, err := json.Marshal(tarball.Manifest{desc})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "root", "manifest.json"), m, 0o644); err != nil {
		return err
	}
	created, err := img.ConfigFile()
	if err != nil {
		return err
	}
	tmp := file + ".tmp"
	out, err := os.Create(tmp)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(out)
	err = writeTree(tw, filepath.Join(dir, "root"), created.Created.Time, false)
	if err == nil {
		err = tw.Close()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, file)
}

func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

// ReadArchive reads the image named ref from an archive of WriteArchive.
func ReadArchive(file string, ref name.Tag) (v1.Image, error) {
	return tarball.ImageFromPath(file, &ref)
}

// Push pushes img to ref with the credentials of the docker config
// (~/.docker/config.json), as crane and docker push do. Registries on
// localhost and private networks are spoken to over plain http.
func Push(img v1.Image, ref name.Reference) error {
	return remote.Write(ref, img, remote.WithAuthFromKeychain(authn.DefaultKeychain))
}

// Size is what pulling an image transfers: its compressed layers.
type Size struct {
	Total  int64
	Layers []int64
}

// Sizes returns img's compressed layer sizes.
func Sizes(img v1.Image) (Size, error) {
	layers, err := img.Layers()
	if err != nil {
		return Size{}, err
	}
	var s Size
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return Size{}, err
		}
		s.Layers = append(s.Layers, n)
		s.Total += n
	}
	return s, nil
}

// Unpack writes img's file system (its layers applied in order) into dir,
// as a container runtime's snapshotter would.
func Unpack(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, os.FileMode(h.Mode).Perm())
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, target)
		case tar.TypeLink:
			err = os.Link(filepath.Join(dir, filepath.Clean("/"+h.Linkname)), target)
		case tar.TypeReg:
			err = writeFile(target, tr, os.FileMode(h.Mode).Perm())
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			err = os.Lchown(target, h.Uid, h.Gid)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
}

func writeFile(path string, r io.Reader, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
