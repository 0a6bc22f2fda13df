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
	dirs  = map[string]string{} // by build flags: commands built alike share one
)

// Setup makes the directory for the binaries; a TestMain that builds
// with Build or Path calls it (or Main) first and calls cleanup last.
func Setup() (cleanup func(), err error) {
	d, err := os.MkdirTemp("", "vmop-bin-")
	if err != nil {
		return nil, fmt.Errorf("vmopbin: %w", err)
	}
	mu.Lock()
	dir = d
	mu.Unlock()
	return func() { os.RemoveAll(d) }, nil
}

// Main runs a package's tests between Setup and its cleanup:
// os.Exit(vmopbin.Main(m)).
func Main(m *testing.M) int {
	cleanup, err := Setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	return m.Run()
}

// Build returns the path of cmd/name of this module built with the
// images' build tags and the given go build flags (e.g. "-ldflags",
// "-X ..."), building it on first use. Commands built with the same flags
// are in the same directory, to be put on a PATH together.
func Build(tb testing.TB, name string, flags ...string) string {
	tb.Helper()
	path, err := Path(name, flags...)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// Path is Build for code outside a test, such as a TestMain's setup.
func Path(name string, flags ...string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		return "", fmt.Errorf("vmopbin.Build(%q): call vmopbin.Main or Setup from the package's TestMain", name)
	}
	key := strings.Join(append([]string{name}, flags...), "\x00")
	if path, ok := built[key]; ok {
		return path, nil
	}
	flagsKey := strings.Join(flags, "\x00")
	sub, ok := dirs[flagsKey]
	if !ok {
		sub = filepath.Join(dir, fmt.Sprint(len(dirs)))
		dirs[flagsKey] = sub
	}
	out := filepath.Join(sub, name)
	args := append(append([]string{"build", "-tags", imagebuild.Tags, "-o", out}, flags...), "github.com/vmop/vmop/cmd/"+name)
	// Without cgo, as the images and the krew archives are built.
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	built[key] = out
	return out, nil
}
