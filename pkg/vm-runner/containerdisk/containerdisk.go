// Package containerdisk takes the disk out of a containerDisk image (an
// image holding a disk as the one file of its /disk directory, as
// KubeVirt's are): an init container of the VM's pod runs in that image
// ("vm-runner disk fetch", with vm-runner copied in by CopySelf, since
// such images hold no program) and copies the file into the pod's scratch
// volume, where vm-runner import reads it as any local image.
package containerdisk

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
)

// Options are what Fetch copies and where.
type Options struct {
	// Dir is the image's disk directory (/disk).
	Dir string
	// To is the copy's path.
	To string
	// RecordDir holds the VM's import records, Disk names the disk's.
	RecordDir, Disk string
	Log             *slog.Logger
}

// Fetch copies the disk file of o.Dir to o.To, unless the disk's import
// record says it was filled: then the import reads nothing, and the copy
// would only cost time and the node's disk. It tells whether it copied.
func Fetch(o Options) (bool, error) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	rec, err := diskimport.ReadRecord(o.RecordDir, o.Disk)
	switch {
	case err != nil:
		// Unreadable to this image's user, say: copy, and let the import,
		// which reads it too, decide.
		o.Log.Warn("Cannot read the disk's import record; copying", "disk", o.Disk, "err", err)
	case rec != nil && rec.State == diskimport.StateDone:
		o.Log.Info("The disk was filled before; nothing to copy", "disk", o.Disk, "source", rec.Source)
		return false, nil
	}
	from, err := Find(o.Dir)
	if err != nil {
		return false, err
	}
	start := time.Now()
	n, err := copyFile(from, o.To)
	if errors.Is(err, fs.ErrPermission) {
		return false, fmt.Errorf("%w: the disk file must be readable by uid %d, the VM pod's user (KubeVirt's convention too: ADD --chown=107:107 in the image's Containerfile)", err, os.Getuid())
	}
	if err != nil {
		return false, err
	}
	o.Log.Info("Copied the disk out of its image", "disk", o.Disk, "file", from, "bytes", n, "took", time.Since(start))
	return true, nil
}

// Find returns the disk file of a containerDisk's directory: its one
// regular file (a symbolic link to one counts).
func Find(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("the image has no %s directory: not a containerDisk image", dir)
		}
		return "", err
	}
	var files, others []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			files = append(files, p)
		} else {
			others = append(others, e.Name())
		}
	}
	switch len(files) {
	case 1:
		return files[0], nil
	case 0:
		if len(others) > 0 {
			return "", fmt.Errorf("the image's %s holds no disk file, only %s", dir, strings.Join(others, ", "))
		}
		return "", fmt.Errorf("the image's %s is empty: not a containerDisk image", dir)
	default:
		return "", fmt.Errorf("the image's %s holds %d files (%s): want exactly one disk", dir, len(files), strings.Join(files, ", "))
	}
}

// CopySelf copies the running program to dest, executable by anyone:
// the init containers that run in a containerDisk image start it there.
func CopySelf(dest string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if _, err := copyFile(self, dest); err != nil {
		return err
	}
	return os.Chmod(dest, 0o755)
}

// copyFile copies from to a temporary file beside to, then renames it:
// a copy cut off is never taken for a whole one.
func copyFile(from, to string) (int64, error) {
	src, err := os.Open(from)
	if err != nil {
		return 0, err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+"-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, src)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	// Readable by whichever user the import runs as.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return n, err
	}
	return n, os.Rename(tmp.Name(), to)
}
