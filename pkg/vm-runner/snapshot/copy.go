package snapshot

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Copy copies the first size bytes of the raw disk at from (all of it
// when size is 0) onto the disk at to (block devices, or image files,
// which are made), with qemu-img (found on PATH when empty), and syncs
// it: a stopped VM's disk into its snapshot, or a snapshot's back. Zeros
// become holes where to can have them. It returns the bytes copied.
func Copy(ctx context.Context, qemuImg, from, to string, size int64) (int64, error) {
	if qemuImg == "" {
		qemuImg = "qemu-img"
	}
	if size == 0 {
		var err error
		if size, err = diskSize(from); err != nil {
			return 0, err
		}
	}
	src, err := rawImageOpts(from, size)
	if err != nil {
		return 0, err
	}
	if err := ensureFile(to, size); err != nil {
		return 0, err
	}
	dst, err := rawImageOpts(to, size)
	if err != nil {
		return 0, err
	}
	if room, err := diskSize(to); err != nil {
		return 0, err
	} else if room < size {
		return 0, fmt.Errorf("%s holds %d bytes, fewer than the disk's %d", to, room, size)
	}
	// -n: to exists; -W: out of order, as fast as the disks go; no cache
	// on the target: the page cache does not fill with a disk read once.
	out, err := exec.CommandContext(ctx, qemuImg, "convert", "-n", "-W", "-t", "none", "-T", "none",
		"--image-opts", src, "--target-image-opts", dst).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("copying %s to %s: %v: %s", from, to, err, strings.TrimSpace(string(out)))
	}
	return size, syncPath(to)
}

// diskSize is the size of the disk at path, a block device or a file.
func diskSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, io.SeekEnd)
}
