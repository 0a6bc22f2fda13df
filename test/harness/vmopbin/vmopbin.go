// Package vmopbin builds vmop's commands for tests: each one once per test
// process, whichever tests ask for it. Go's build cache makes the build of
// unchanged sources a link; `-count=1` still builds anew, as it must, since
// the test cache does not track a built binary's sources.
package vmopbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/vmop/vmop/internal/imagebuild"
)

var (
	mu    sync.Mutex
	dir   string                // set by Main
	built = map[string]string{} // by name and build flags
)

// Main runs a package's tests with a directory for the binaries, and
// removes it after; a TestMain that builds with Build calls it:
// os.Exit(vmopbin.Main(m)).
func Main(m *testing.M) int {
	d, err := os.MkdirTemp("", "vmop-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmopbin:", err)
		return 1
	}
	mu.Lock()
	dir = d
	mu.Unlock()
	defer os.RemoveAll(d)
	return m.Run()
}

// Build returns the path of cmd/name of this module built with the
// images' build tags and the given go build flags (e.g. "-ldflags",
// "-X ..."), building it on first use.
func Build(tb testing.TB, name string, flags ...string) string {
	tb.Helper()
	path, err := build(name, flags)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

func build(name string, flags []string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		return "", fmt.Errorf("vmopbin.Build(%q): call vmopbin.Main from the package's TestMain", name)
	}
	key := strings.Join(append([]string{name}, flags...), "\x00")
	if path, ok := built[key]; ok {
		return path, nil
	}
	out := filepath.Join(dir, fmt.Sprint(len(built)), name)
	args := append(append([]string{"build", "-tags", imagebuild.Tags, "-o", out}, flags...), "github.com/vmop/vmop/cmd/"+name)
	if b, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	built[key] = out
	return out, nil
}
