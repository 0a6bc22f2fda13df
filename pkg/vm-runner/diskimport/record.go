package diskimport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// State is where an import of a disk stands.
type State string

const (
	// StateImporting is written before the first byte is written to the
	// disk, so that an interrupted import is known as ours.
	StateImporting State = "Importing"
	// StateDone is written once the disk holds the image, synced.
	StateDone State = "Done"
)

// Record is what is known of a disk's import. It lives in a directory the
// VM keeps across restarts (the runner's data volume), one file per disk,
// so that a disk is imported at most once.
type Record struct {
	Disk        string    `json:"disk"`
	Source      string    `json:"source"` // a URL, a file or "upload:<name>"
	Checksum    string    `json:"checksum,omitempty"`
	State       State     `json:"state"`
	Started     time.Time `json:"started"`
	Finished    time.Time `json:"finished,omitzero"`
	Format      string    `json:"format,omitempty"`
	VirtualSize int64     `json:"virtualSize,omitempty"`
}

// recordPath is the file of disk's record in dir.
func recordPath(dir, disk string) (string, error) {
	if disk == "" || disk == "." || disk == ".." || strings.ContainsAny(disk, "/\x00") {
		return "", fmt.Errorf("import record: invalid disk name %q", disk)
	}
	return filepath.Join(dir, "import-"+disk+".json"), nil
}

// ReadRecord reads disk's record in dir; nil and no error when there is
// none. A file that is no valid record is an error naming it: guessing
// would risk overwriting the disk.
func ReadRecord(dir, disk string) (*Record, error) {
	path, err := recordPath(dir, disk)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("import record %s: %w", path, err)
	}
	if r.Disk != disk {
		return nil, fmt.Errorf("import record %s: disk: want %q, got %q", path, disk, r.Disk)
	}
	if r.State != StateImporting && r.State != StateDone {
		return nil, fmt.Errorf("import record %s: state: want %s or %s, got %q", path, StateImporting, StateDone, r.State)
	}
	return &r, nil
}

// WriteRecord writes r into dir atomically: a crash leaves either the old
// record or the new one, never a torn file that would read as corrupt.
// dir is made if need be (a VM that never ran has none).
func WriteRecord(dir string, r Record) error {
	path, err := recordPath(dir, r.Disk)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("import record %s: %w", path, err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".import-"+r.Disk+"-*.tmp")
	if err != nil {
		return fmt.Errorf("import record %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // fails once renamed, as it should
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("import record %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("import record %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("import record %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("import record %s: %w", path, err)
	}
	// The rename is durable only once the directory is synced.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("import record %s: %w", path, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("import record %s: sync %s: %w", path, dir, err)
	}
	return nil
}

// Decision is what to do with a disk that may be imported into.
type Decision string

const (
	// DecisionImport: import into the disk.
	DecisionImport Decision = "Import"
	// DecisionDone: the disk was imported; leave it alone.
	DecisionDone Decision = "Done"
	// DecisionHeldData: the disk holds data that no import of ours wrote;
	// leave it alone.
	DecisionHeldData Decision = "HeldData"
)

// Decide is the one rule, for the init container and the upload alike, of
// whether a disk may be imported into. rec is the disk's record (nil when
// there is none), empty what Empty says of the disk.
//
//   - A Done record: the import finished and the guest may have written
//     to the disk since; it is never touched again, even when the source
//     has changed (the caller warns when rec.Source differs). To import
//     anew, delete the disk. force does not change this: it is for data we
//     know nothing of, and here we know the disk is the guest's.
//   - An Importing record: an import of ours was interrupted before it
//     was done, so the guest never ran on the disk and what it holds is
//     our own partial write. Importing again is safe, even from a changed
//     source and whatever Empty says.
//   - No record and an empty disk: a new disk. Import.
//   - No record and a disk that is not empty: the data came from elsewhere
//     (a restored backup, a disk filled by hand, a record lost with its
//     volume). It is never overwritten unless force says so.
func Decide(rec *Record, empty, force bool) Decision {
	switch {
	case rec == nil && (empty || force):
		return DecisionImport
	case rec == nil:
		return DecisionHeldData
	case rec.State == StateDone:
		return DecisionDone
	case rec.State == StateImporting:
		return DecisionImport
	default:
		// A state this version does not know (ReadRecord refuses it): the
		// disk may well be the guest's.
		return DecisionHeldData
	}
}
