// Package runnerdata is what the runner keeps on a VM's runner-data
// volume (firmware variables, TPM state, machine uuid, import records):
// files written whole, and their archive, which a snapshot keeps beside
// the VM's disks.
package runnerdata

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// MaxArchive bounds a runner data archive: it lives in the snapshot's
// Secret (1 MiB at most); OVMF's variables, mostly unwritten flash,
// compress to a few KiB.
const MaxArchive = 768 << 10

// Archive writes the regular files under dir (the VM's runner data) to w
// as a gzipped tar, with their paths relative to dir.
func Archive(dir string, w io.Writer) error {
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// A file system's own directory, on claims that have one.
		if d.IsDir() && d.Name() == "lost+found" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		return addFile(tw, path, rel)
	})
	if err != nil {
		return fmt.Errorf("archiving %s: %w", dir, err)
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return gz.Close()
}

func addFile(tw *tar.Writer, path, name string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(name), Mode: int64(fi.Mode().Perm()), Size: fi.Size(), ModTime: fi.ModTime()}); err != nil {
		return err
	}
	_, err = io.CopyN(tw, f, fi.Size())
	return err
}

// UUIDFile holds the VM's SMBIOS uuid, made at its first start: a
// clone's runner data leaves it out, so that the clone gets its own.
const UUIDFile = "uuid.txt"

// Extract makes dir hold exactly the files of the archive r but those
// named in drop: the VM's runner data as its snapshot has it. The whole
// archive is read and checked first; each file is written whole
// (WriteFile), and what it does not have is removed after.
func Extract(r io.Reader, dir string, drop ...string) error {
	gz, err := gzip.NewReader(io.LimitReader(r, MaxArchive))
	if err != nil {
		return fmt.Errorf("the runner data archive: %w", err)
	}
	type file struct {
		path string
		mode os.FileMode
		data []byte
	}
	var files []file
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("the runner data archive: %w", err)
		}
		name := filepath.FromSlash(h.Name)
		if h.Typeflag != tar.TypeReg || !filepath.IsLocal(name) {
			return fmt.Errorf("the runner data archive: %q is not a file under the data directory", h.Name)
		}
		// The archive's size bounds what is read, decompressed too.
		data, err := io.ReadAll(io.LimitReader(tr, 4*MaxArchive))
		if err != nil {
			return fmt.Errorf("the runner data archive: %w", err)
		}
		if !slices.Contains(drop, name) {
			files = append(files, file{filepath.Join(dir, name), os.FileMode(h.Mode).Perm(), data})
		}
	}
	keep := map[string]bool{}
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
			return err
		}
		if err := WriteFile(f.path, f.mode, func(w io.Writer) error {
			_, err := w.Write(f.data)
			return err
		}); err != nil {
			return err
		}
		keep[f.path] = true
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && d.Name() == "lost+found":
			return filepath.SkipDir
		case d.Type().IsRegular() && !keep[path]:
			return os.Remove(path)
		}
		return nil
	})
}

// WriteFile writes a temporary file beside path with write, syncs it
// and renames it over path: on a full volume (ENOSPC) or a crash, path
// keeps what it held, or stays absent.
func WriteFile(path string, perm fs.FileMode, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	err = write(out)
	if err == nil {
		err = out.Chmod(perm)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
