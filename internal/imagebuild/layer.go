// Package imagebuild assembles vmop's container images (vm-runner,
// vm-operator and the kubectl-vm KRM function), and the tests' images of
// binaries built elsewhere (Prebuilt), without a container engine:
// layers are tar files written here, images and archives are made with
// go-containerregistry. The same inputs give the same digests: entries are
// sorted, times clamped, owners numeric, and nothing of the build machine
// (user names, extended attributes, device nodes) gets in.
package imagebuild

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// File is one entry of a layer made by FilesLayer.
type File struct {
	// Path in the image, without a leading slash.
	Path string
	// Mode holds the type (regular file when no type bit is set,
	// fs.ModeDir, fs.ModeSymlink) and the permissions.
	Mode fs.FileMode
	// Data is a regular file's content, or a symlink's target.
	Data []byte
	// Source, if set, is a file whose content a regular file has instead
	// of Data: binaries of hundreds of MB are not read into memory.
	Source string
	// UID and GID own the entry.
	UID, GID int
}

// FilesLayer is a layer holding files, with parent directories added
// (0755, root) where files does not list them.
func FilesLayer(dir string, files []File, epoch time.Time) (v1.Layer, error) {
	byPath := map[string]File{}
	for _, f := range files {
		f.Path = strings.Trim(path.Clean(f.Path), "/")
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			if _, ok := byPath[d]; !ok {
				byPath[d] = File{Path: d, Mode: fs.ModeDir | 0o755}
			}
		}
		byPath[f.Path] = f
	}
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	return writeLayer(dir, func(tw *tar.Writer) error {
		for _, p := range paths {
			f := byPath[p]
			h := &tar.Header{Name: p, Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: epoch}
			switch {
			case f.Mode.IsDir():
				h.Typeflag, h.Name = tar.TypeDir, p+"/"
			case f.Mode&fs.ModeSymlink != 0:
				h.Typeflag, h.Linkname = tar.TypeSymlink, string(f.Data)
			case f.Source != "":
				if err := writeSource(tw, h, f.Source); err != nil {
					return err
				}
				continue
			default:
				h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Data))
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if h.Typeflag == tar.TypeReg {
				if _, err := tw.Write(f.Data); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// writeSource writes h as a regular file with the content of the file src.
func writeSource(tw *tar.Writer, h *tar.Header, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return err
	}
	h.Typeflag, h.Size = tar.TypeReg, info.Size()
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	_, err = io.Copy(tw, f)
	return err
}

// DirLayer is a layer of the tree at root: entries in name order, times
// clamped to epoch, the owners' numeric ids, hard links kept. Device nodes
// are left out (the container runtime makes /dev), as is anything but
// files, directories and symlinks.
func DirLayer(dir, root string, epoch time.Time) (v1.Layer, error) {
	return writeLayer(dir, func(tw *tar.Writer) error { return writeTree(tw, root, epoch, true) })
}

// writeTree writes the tree at root as DirLayer describes; without
// keepOwners everything belongs to root.
func writeTree(tw *tar.Writer, root string, epoch time.Time, keepOwners bool) error {
	// The first path of each inode with several links.
	seen := map[uint64]string{}
	return walkSorted(root, "", func(rel string, info fs.FileInfo) error {
		st, _ := info.Sys().(*syscall.Stat_t)
		h := &tar.Header{Name: rel, Mode: tarMode(info.Mode()), ModTime: info.ModTime().Truncate(time.Second)}
		if h.ModTime.After(epoch) {
			h.ModTime = epoch
		}
		if st != nil && keepOwners {
			h.Uid, h.Gid = int(st.Uid), int(st.Gid)
		}
		src := filepath.Join(root, rel)
		switch {
		case info.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(src)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case info.Mode().IsRegular():
			if st != nil && st.Nlink > 1 {
				if first, ok := seen[st.Ino]; ok {
					h.Typeflag, h.Linkname = tar.TypeLink, first
					return tw.WriteHeader(h)
				}
				seen[st.Ino] = rel
			}
			h.Typeflag, h.Size = tar.TypeReg, info.Size()
		default:
			return nil
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag != tar.TypeReg {
			return nil
		}
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
}

// tarMode is m's permissions with setuid, setgid and sticky as tar has
// them.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// walkSorted calls fn for every entry below root in byte order of the
// names (filepath.Walk's lexical order is that too, but says so only of
// each directory), skipping what is below dev/.
func walkSorted(root, rel string, fn func(rel string, info fs.FileInfo) error) error {
	entries, err := os.ReadDir(filepath.Join(root, rel))
	if err != nil {
		return err
	}
	for _, e := range entries { // sorted by name
		r := path.Join(rel, e.Name())
		info, err := e.Info()
		if err != nil {
			return err
		}
		if err := fn(r, info); err != nil {
			return fmt.Errorf("%s: %w", r, err)
		}
		if info.IsDir() && r != "dev" {
			if err := walkSorted(root, r, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeLayer writes a tar with fill into a file in dir and returns it as a
// gzip-compressed OCI layer.
func writeLayer(dir string, fill func(*tar.Writer) error) (v1.Layer, error) {
	f, err := os.CreateTemp(dir, "layer-*.tar")
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(f)
	err = fill(tw)
	if err == nil {
		err = tw.Close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	// Compressed once: the digest and every writer read the same bytes.
	return tarball.LayerFromFile(f.Name(), tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
