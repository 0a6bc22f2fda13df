package diskimport

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if r, err := ReadRecord(dir, "root"); r != nil || err != nil {
		t.Fatalf("no record yet: got %v, %v", r, err)
	}
	started := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	importing := Record{Disk: "root", Source: "https://example.org/debian.qcow2", Checksum: "sha256:" + strings.Repeat("a", 64),
		State: StateImporting, Started: started}
	if err := WriteRecord(dir, importing); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRecord(dir, "root")
	if err != nil {
		t.Fatal(err)
	}
	if *got != importing {
		t.Errorf("got %+v, want %+v", *got, importing)
	}
	done := importing
	done.State, done.Finished, done.Format, done.VirtualSize = StateDone, started.Add(time.Minute), "qcow2", 2<<30
	if err := WriteRecord(dir, done); err != nil {
		t.Fatal(err)
	}
	if got, err = ReadRecord(dir, "root"); err != nil || *got != done {
		t.Errorf("got %+v, %v, want %+v", got, err, done)
	}
	// Another disk's record is its own.
	if r, err := ReadRecord(dir, "data"); r != nil || err != nil {
		t.Errorf("other disk: got %v, %v", r, err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("want one file in %s, got %v", dir, entries)
	}
}

func TestRecordCorrupt(t *testing.T) {
	for name, content := range map[string]string{
		"torn":        `{"disk": "root", "sta`,
		"other disk":  `{"disk": "data", "state": "Done"}`,
		"no state":    `{"disk": "root"}`,
		"odd state":   `{"disk": "root", "state": "Finished"}`,
		"not an obj":  `[]`,
		"empty file":  ``,
		"wrong types": `{"disk": "root", "state": "Done", "virtualSize": "big"}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "import-root.json")
			if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			r, err := ReadRecord(dir, "root")
			if err == nil {
				t.Fatalf("no error, got %+v", r)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error does not name %s: %v", path, err)
			}
		})
	}
}

func TestRecordDiskName(t *testing.T) {
	dir := t.TempDir()
	for _, disk := range []string{"", ".", "..", "../x", "a/b", "a\x00b"} {
		if _, err := ReadRecord(dir, disk); err == nil {
			t.Errorf("ReadRecord(%q): no error", disk)
		}
		if err := WriteRecord(dir, Record{Disk: disk, State: StateDone}); err == nil {
			t.Errorf("WriteRecord(%q): no error", disk)
		}
	}
}

func TestDecide(t *testing.T) {
	importing := &Record{Disk: "root", State: StateImporting}
	done := &Record{Disk: "root", State: StateDone}
	unknown := &Record{Disk: "root", State: "Finished"}
	for _, tc := range []struct {
		name         string
		rec          *Record
		empty, force bool
		want         Decision
	}{
		{"new disk", nil, true, false, DecisionImport},
		{"new disk, force", nil, true, true, DecisionImport},
		{"foreign data", nil, false, false, DecisionHeldData},
		{"foreign data, force", nil, false, true, DecisionImport},
		{"interrupted, empty", importing, true, false, DecisionImport},
		{"interrupted, partly written", importing, false, false, DecisionImport},
		{"done", done, false, false, DecisionDone},
		{"done, force", done, false, true, DecisionDone},
		{"done, guest wiped it", done, true, false, DecisionDone},
		{"unknown state", unknown, false, true, DecisionHeldData},
	} {
		if got := Decide(tc.rec, tc.empty, tc.force); got != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, got, tc.want)
		}
	}
}
