// Package testcache is where tests keep what is slow to make and the same
// from run to run (guest kernels, initramfs, disks): the user's cache, as
// hack/build-control-plane.sh keeps the control plane.
package testcache

import (
	"fmt"
	"os"
	"path/filepath"
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
