package diskfile_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmop/vmop/pkg/vm-runner/diskfile"
)

func TestSize(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		name                   string
		claim, allocated, free int64
		want                   int64
	}{
		{"room for the claim", 20 << 30, 0, 100 << 30, 20 << 30},
		{"file system smaller than the claim", 20 << 30, 0, 19<<30 + 5, 19 << 30},
		{"a full file counts its own blocks", 20 << 30, 19 << 30, 0, 19 << 30},
		{"odd claim rounds down", 10*mib + 7, 0, 1 << 40, 10 * mib},
		{"no room", 20 << 30, 0, mib - 1, 0},
	} {
		if got := diskfile.Size(c.claim, c.allocated, c.free); got != c.want {
			t.Errorf("%s: Size(%d, %d, %d) = %d, want %d", c.name, c.claim, c.allocated, c.free, got, c.want)
		}
	}
}

func size(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func TestEnsureMakesGrowsNeverShrinks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk.img")
	got, err := diskfile.Ensure(path, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	if got != 64<<20 || size(t, path) != 64<<20 {
		t.Fatalf("made %d bytes (file %d), want %d", got, size(t, path), 64<<20)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("guest data"), 1<<20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	// The claim was expanded: the file grows, its data stays.
	if got, err := diskfile.Ensure(path, 128<<20); err != nil || got != 128<<20 {
		t.Fatalf("grow: %d, %v; want %d", got, err, 128<<20)
	}
	// A smaller claim size (an edited template) never cuts the file.
	if got, err := diskfile.Ensure(path, 32<<20); err != nil || got != 128<<20 || size(t, path) != 128<<20 {
		t.Fatalf("shrink: %d, %v (file %d); want it kept at %d", got, err, size(t, path), 128<<20)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b[1<<20:1<<20+10]) != "guest data" {
		t.Fatal("the guest's data is gone")
	}
}

func TestEnsureRefusesNonFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "disk.img")
	if err := os.Mkdir(path, 0o700); err != nil {
		t.Fatal(err)
	}
	_, err := diskfile.Ensure(path, 64<<20)
	if err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Ensure on a directory: %v, want a refusal", err)
	}
	if _, err := diskfile.Ensure(filepath.Join(dir, "missing", "disk.img"), 64<<20); err == nil {
		t.Fatal("Ensure in a missing directory: no error")
	}
}
