package diskimport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWriteSparse: the staging file holds the same bytes, takes room only
// for its data and has the right size also when it ends in zeros.
func TestWriteSparse(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	data := make([]byte, 5<<20+77)
	for _, r := range [][2]int{{1, 10}, {4095, 2}, {1<<20 - 3, 8192}, {3 << 20, 100000}} {
		for i := r[0]; i < r[0]+r[1]; i++ {
			data[i] = byte(rng.UintN(255) + 1)
		}
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "staged"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Short reads, to see that blocks are not assumed whole.
	n, err := writeSparse(f, &shortReader{r: bytes.NewReader(data), n: 7777})
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(len(data)) {
		t.Errorf("copied %d bytes, want %d", n, len(data))
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("staged file differs (size %d, want %d)", len(got), len(data))
	}
	if used := allocated(t, f.Name()); used > 1<<20 {
		t.Errorf("staged file takes %d bytes on disk, want about 128 KiB", used)
	}
}

type shortReader struct {
	r io.Reader
	n int
}

func (s *shortReader) Read(p []byte) (int, error) {
	return s.r.Read(p[:min(len(p), s.n)])
}

// TestStageUnexpectedEOF: a source cut short is an error, not an image that
// ends early.
func TestStageUnexpectedEOF(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "staged"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := io.MultiReader(bytes.NewReader(make([]byte, 1000)), errReader{io.ErrUnexpectedEOF})
	if _, err := stage(context.Background(), r, 0, 1<<30, f, nil, nil); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("got %v, want io.ErrUnexpectedEOF", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func TestCheckInfo(t *testing.T) {
	withDataFile := imageInfo{Format: "qcow2", VirtualSize: 1}
	withDataFile.FormatSpecific.Data.DataFile = "/dev/sda"
	for _, tc := range []struct {
		name string
		info imageInfo
		ok   bool
	}{
		{"raw", imageInfo{Format: "raw", VirtualSize: 1}, true},
		{"qcow2", imageInfo{Format: "qcow2", VirtualSize: 1}, true},
		{"backing file", imageInfo{Format: "qcow2", VirtualSize: 1, BackingFilename: "/etc/shadow"}, false},
		{"data file", withDataFile, false},
		{"vmdk", imageInfo{Format: "vmdk", VirtualSize: 1}, false},
		{"luks", imageInfo{Format: "luks", VirtualSize: 1}, false},
	} {
		err := checkInfo(tc.info, "src")
		var fe *FormatError
		if tc.ok && err != nil || !tc.ok && !errors.As(err, &fe) {
			t.Errorf("%s: got %v", tc.name, err)
		}
	}
}

func TestSplitCRLF(t *testing.T) {
	// What qemu-img convert -p prints.
	out := "    (0.00/100%)\r    (50.00/100%)\r    (100.00/100%)\r\n"
	var got []string
	for rest := []byte(out); len(rest) > 0; {
		adv, tok, _ := splitCRLF(rest, true)
		if m := progressPattern.FindSubmatch(tok); m != nil {
			got = append(got, string(m[1]))
		}
		rest = rest[adv:]
	}
	if want := []string{"0.00", "50.00", "100.00"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
