package diskimport

import (
	"os"
	"syscall"
	"testing"
)

// allocated is the space path takes on disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Blocks * 512
}
