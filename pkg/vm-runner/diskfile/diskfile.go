// Package diskfile keeps a VM disk that lives on a Filesystem claim: a
// sparse raw image file, made at the claim's size on first use and grown
// when the claim was expanded, never shrunk. The runner, vm-runner import
// and the uploader pod all call Ensure before they use such a disk, so
// whichever comes first makes the file and none depends on the others.
package diskfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// align rounds sizes down to whole MiB: qemu and guests like aligned
// disks, and the bytes lost are nothing.
const align = 1 << 20

// Ensure makes the file at path claimSize bytes long, or grows it to
// that, but no larger than the file system can hold: the file's blocks
// and the free space together (a claim's file system keeps some of its
// size for itself, and a directory-backed claim may share a smaller
// disk). A guest that fills a larger file would get I/O errors, not a
// full disk. It returns the file's size.
func Ensure(path string, claimSize int64) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &st); err != nil {
		return 0, fmt.Errorf("disk file %s: %w", path, err)
	}
	free := int64(st.Bavail) * int64(st.Bsize) //nolint:unconvert // Bsize is uint32 on darwin
	var size, allocated int64
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		if !fi.Mode().IsRegular() {
			return 0, fmt.Errorf("disk file %s is not a regular file (%s)", path, fi.Mode().Type())
		}
		size = fi.Size()
		if sys, ok := fi.Sys().(*unix.Stat_t); ok {
			allocated = sys.Blocks * 512
		}
	case !errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("disk file %s: %w", path, err)
	}
	want := Size(claimSize, allocated, free)
	if want <= size {
		// Never shrink: the guest's data may be anywhere in the file.
		return size, nil
	}
	if size == 0 && want < align {
		return 0, fmt.Errorf("disk file %s: its file system has %d bytes free, too little for a disk", path, free)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o660)
	if err != nil {
		return 0, fmt.Errorf("disk file %s: %w", path, err)
	}
	if err := f.Truncate(want); err != nil {
		_ = f.Close()
		return 0, fmt.Errorf("disk file %s: size it to %d bytes: %w", path, want, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return 0, fmt.Errorf("disk file %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("disk file %s: %w", path, err)
	}
	return want, nil
}

// Size is the size a disk file should have on a claim of claimSize bytes
// when the file has allocated bytes on a file system with free bytes
// left: what the file could grow to fill, at most the claim, in whole
// MiB.
func Size(claimSize, allocated, free int64) int64 {
	return min(claimSize, allocated+free) / align * align
}
