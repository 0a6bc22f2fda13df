package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/vmop/vmop/test/harness/testcache"
)

// BinDirEnv names a directory that holds prebuilt control-plane binaries;
// when set, the build script is not run.
const BinDirEnv = "VMOP_KUBE_BIN_DIR"

// KubeBinDir returns the directory holding the named control-plane binaries
// (etcd and kube-apiserver when none are named): $VMOP_KUBE_BIN_DIR, or the
// cache of hack/build-control-plane.sh, which builds them on the first run
// (minutes).
func KubeBinDir(ctx context.Context, names ...string) (string, error) {
	if len(names) == 0 {
		names = []string{"etcd", "kube-apiserver"}
	}
	dir := os.Getenv(BinDirEnv)
	if dir == "" {
		var err error
		if dir, err = runBuildScript(ctx, names); err != nil {
			return "", err
		}
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			return "", fmt.Errorf("control-plane binary: %w", err)
		}
	}
	return dir, nil
}

func runBuildScript(ctx context.Context, names []string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	var args []string
	for _, n := range names {
		if n != "etcd" && n != "kube-apiserver" { // the script builds those two without "all"
			args = append(args, "all")
			break
		}
	}
	// Test binaries of several packages run at once; the script has no lock
	// of its own and two builds would write the same file.
	unlock, err := testcache.Lock(filepath.Join(os.TempDir(), "vmop-build-control-plane.lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-control-plane.sh"), args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/build-control-plane.sh: %w: %s", err, tail(stderr.String(), 20))
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}

// ModuleRoot is the nearest directory at or above the working directory that
// holds a go.mod.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
