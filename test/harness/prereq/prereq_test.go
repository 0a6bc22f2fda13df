package prereq

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// recorder stands in for a test: it records how the call ended (Skipf or
// Fatalf end the goroutine, as on a real test).
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func run(t *testing.T, f func(testing.TB)) *recorder {
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// TestTiers: under -short what needs more than Go skips, saying what;
// otherwise a missing program or file fails the test with what to
// install, and one that is there passes.
func TestTiers(t *testing.T) {
	missing := run(t, func(tb testing.TB) { Commands(tb, "no-such-package", "vmop-no-such-command") })
	missingFile := run(t, func(tb testing.TB) { Files(tb, "no-such-package", filepath.Join(t.TempDir(), "absent")) })
	present := run(t, func(tb testing.TB) { Commands(tb, "golang", "go") })
	if testing.Short() {
		for _, r := range []*recorder{missing, missingFile, present} {
			if !strings.Contains(r.skipped, "needs ") || !strings.Contains(r.skipped, "-short") || r.failed != "" {
				t.Errorf("with -short: skipped %q, failed %q; want a skip naming the need", r.skipped, r.failed)
			}
		}
		return
	}
	for _, r := range []*recorder{missing, missingFile} {
		if r.skipped != "" || !strings.Contains(r.failed, "make deps") {
			t.Errorf("without -short: skipped %q, failed %q; want a failure saying what to install", r.skipped, r.failed)
		}
	}
	if present.skipped != "" || present.failed != "" {
		t.Errorf("go is on PATH: skipped %q, failed %q", present.skipped, present.failed)
	}
}
