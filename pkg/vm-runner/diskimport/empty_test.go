package diskimport

import (
	"os"
	"path/filepath"
	"testing"
)

// TestEmpty: a regular file (a Filesystem claim's disk) is empty only
// when all of it is zeros; a block device when its ends are (endsZero,
// tried here on the same files).
func TestEmpty(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int64
		at       int64 // where a non-zero byte is written; -1 for none
		zeros    bool  // a zero byte is written at at instead: allocated, still empty
		want     bool
		wantEnds bool
	}{
		{"zero size", 0, -1, false, true, true},
		{"small empty", 4096, -1, false, true, true},
		{"small, data at the end", 4096, 4095, false, false, false},
		{"1.5 MiB, data at the end", 3 << 19, 3<<19 - 1, false, false, false},
		{"large empty", 64 << 20, -1, false, true, true},
		{"boot sector", 64 << 20, 510, false, false, false},
		{"GPT backup", 64 << 20, 64<<20 - 512, false, false, false},
		{"last MiB's first byte", 64 << 20, 63 << 20, false, false, false},
		{"middle only", 64 << 20, 32 << 20, false, false, true},
		{"just past the first MiB", 64 << 20, 1 << 20, false, false, true},
		{"zeros written in the middle", 64 << 20, 32 << 20, true, true, true},
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
				b := []byte{1}
				if tc.zeros {
					b = make([]byte, 8192)
				}
				if _, err := f.WriteAt(b, tc.at); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Empty(path)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Empty: got %v, want %v", got, tc.want)
			}
			ends, err := endsZero(f, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			if ends != tc.wantEnds {
				t.Errorf("endsZero: got %v, want %v", ends, tc.wantEnds)
			}
			f.Close()
		})
	}
	if _, err := Empty(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("missing target: no error")
	}
}
