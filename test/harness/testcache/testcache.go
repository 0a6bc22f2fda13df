// Package testcache is where tests keep what is slow to make and the same
// from run to run (guest kernels, initramfs, disks): the user's cache, as
// hack/build-control-plane.sh keeps the control plane.
package testcache

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Dir returns the cache directory named name, made if missing: under the
// user's cache (~/.cache/vmop), else under a per-user temp directory (no
// HOME in some CI sandboxes).
func Dir(name string) string {
	if d, err := os.UserCacheDir(); err == nil {
		d = filepath.Join(d, "vmop", name)
		if os.MkdirAll(d, 0o755) == nil {
			return d
		}
	}
	d := filepath.Join(os.TempDir(), fmt.Sprintf("vmop-cache-%d", os.Getuid()), name)
	_ = os.MkdirAll(d, 0o755)
	return d
}

// Lock waits for an exclusive lock on the file at path, made if missing,
// and returns its release: test binaries of several packages run at once,
// and one of them builds or runs what they share.
func Lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
