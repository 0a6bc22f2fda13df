package diskimport

import (
	"os"
	"path/filepath"
	"testing"
)

func TestEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int64
		at   int64 // where a non-zero byte is written; -1 for none
		want bool
	}{
		{"zero size", 0, -1, true},
		{"small empty", 4096, -1, true},
		{"small, data at the end", 4096, 4095, false},
		{"1.5 MiB, data at the end", 3 << 19, 3<<19 - 1, false},
		{"large empty", 64 << 20, -1, true},
		{"boot sector", 64 << 20, 510, false},
		{"GPT backup", 64 << 20, 64<<20 - 512, false},
		{"last MiB's first byte", 64 << 20, 63 << 20, false},
		{"middle only", 64 << 20, 32 << 20, true},
		{"just past the first MiB", 64 << 20, 1 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "disk")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(tc.size); err != nil {
				t.Fatal(err)
			}
			if tc.at >= 0 {
				if _, err := f.WriteAt([]byte{1}, tc.at); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
			got, err := Empty(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := Empty(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing target: no error")
	}
}
