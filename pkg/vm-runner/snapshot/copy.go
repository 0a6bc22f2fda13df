package snapshot

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// Copy copies the first size bytes of the raw disk at from onto the disk
// at to (block devices, or image files, which are made), with qemu-img
// (found on PATH when empty), and syncs it: a stopped VM's disk into its
// snapshot, or a snapshot's back. Zeros become holes where to can have
// them.
func Copy(ctx context.Context, qemuImg, from, to string, size int64) error {
	if qemuImg == "" {
		qemuImg = "qemu-img"
	}
	src, err := rawImageOpts(from, size)
	if err != nil {
		return err
	}
	if err := ensureFile(to, size); err != nil {
		return err
	}
	dst, err := rawImageOpts(to, size)
	if err != nil {
		return err
	}
	// -n: to exists; -W: out of order, as fast as the disks go; no cache
	// on the target: the page cache does not fill with a disk read once.
	out, err := exec.CommandContext(ctx, qemuImg, "convert", "-n", "-W", "-t", "none", "-T", "none",
		"--image-opts", src, "--target-image-opts", dst).CombinedOutput()
	if err != nil {
		return fmt.Errorf("copying %s to %s: %v: %s", from, to, err, strings.TrimSpace(string(out)))
	}
	return syncPath(to)
}
