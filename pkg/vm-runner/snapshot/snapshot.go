// Package snapshot is the runner image's part of kubectl vm snapshot and
// restore, outside the runner: the snapshot pod's NBD server that takes
// the copies a running VM's qemu pushes (Serve), the copy of a stopped
// VM's disk (Copy), and the archive of a VM's runner data (firmware
// variables, TPM state, machine uuid, import records) that a snapshot
// keeps beside its disks (Archive, Extract).
package snapshot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// rawImageOpts are qemu's image options for the first size bytes of the
// raw disk at path, a block device or a file: a snapshot's claim may be
// larger than the disk it holds.
func rawImageOpts(path string, size int64) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	driver := "file"
	if fi.Mode()&os.ModeDevice != 0 {
		driver = "host_device"
	}
	if strings.Contains(path, ",") {
		return "", fmt.Errorf("%s: a path with a comma", path)
	}
	return fmt.Sprintf("driver=raw,size=%d,file.driver=%s,file.filename=%s", size, driver, path), nil
}

// ensureFile makes the image file of a Filesystem claim at path, sparse,
// size bytes long, unless path is a device; a longer file is kept.
func ensureFile(path string, size int64) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.Mode()&os.ModeDevice != 0:
		return nil
	case err == nil && fi.Size() >= size:
		return nil
	case err != nil && !errors.Is(err, os.ErrNotExist):
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// syncPath flushes what was written to path (a device or a file) to
// stable storage.
func syncPath(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("syncing %s: %w", path, err)
	}
	return f.Close()
}

// holeChunk is the unit in which digHoles looks for zeros.
const holeChunk = 64 << 10

// digHoles punches out the all-zero chunks of the image file at path: a
// backup job writes the zeros of a disk as zeros (NBD's write-zeroes
// with no hole), which would take the disk's whole size on the
// snapshot's file system. Devices are left as they are.
func digHoles(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return err
	}
	buf := make([]byte, holeChunk)
	// Runs of zero chunks are punched at once: a punch is a journal
	// transaction of the file system.
	start, end := int64(-1), int64(0)
	punch := func() error {
		if start < 0 {
			return nil
		}
		err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, start, end-start)
		start = -1
		return err
	}
	for off := int64(0); ; off += holeChunk {
		n, err := f.ReadAt(buf, off)
		switch {
		case n > 0 && allZero(buf[:n]):
			if start < 0 {
				start = off
			}
			end = off + int64(n)
		default:
			if perr := punch(); perr != nil {
				// A file system without holes keeps the zeros.
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			// A file system without holes keeps the zeros; the caller
			// syncs the file.
			_ = punch()
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
