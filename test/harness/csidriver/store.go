package csidriver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// store keeps the driver's volumes and snapshots in a directory: for each
// a JSON record (written last, it marks a complete copy) beside its data,
// a sparse file (Block) or a directory (Filesystem). A Block volume's file
// is on a loop device from its creation to its deletion: a disk of the
// node's.
type store struct {
	dir string
}

// record is what the store knows of a volume or a snapshot.
type record struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Block: the data is a file for a loop device, else a directory.
	Block bool  `json:"block"`
	Size  int64 `json:"size"`
	// FromSnapshot and FromVolume are a volume's content source; Source
	// is a snapshot's volume.
	FromSnapshot string    `json:"fromSnapshot,omitempty"`
	FromVolume   string    `json:"fromVolume,omitempty"`
	Source       string    `json:"source,omitempty"`
	Created      time.Time `json:"created"`
}

// kind is the store's subdirectory of volumes or of snapshots.
type kind string

const (
	volumes   kind = "volumes"
	snapshots kind = "snapshots"
)

func newStore(dir string) (*store, error) {
	for _, d := range []string{string(volumes), string(snapshots), "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	return &store{dir: dir}, nil
}

// safeName is a name that is its own ID: what the sidecars make
// (pvc-UID, snapshot-UID).
var safeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// idOf is the ID of a volume or snapshot named name: the name when it
// makes a file name, else a hash of it. The same name gives the same ID,
// which is what makes CreateVolume and CreateSnapshot idempotent.
func idOf(name string) string {
	if safeName.MatchString(name) {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return "h-" + hex.EncodeToString(sum[:16])
}

// validID says whether id may name a file of the store: IDs come from the
// sidecars and the kubelet, and must not reach outside it.
func validID(id string) bool { return safeName.MatchString(id) }

func (s *store) recordPath(k kind, id string) string {
	return filepath.Join(s.dir, string(k), id+".json")
}

// dataPath is the file or directory of a volume or snapshot.
func (s *store) dataPath(k kind, id string, block bool) string {
	if block {
		return filepath.Join(s.dir, string(k), id+".img")
	}
	return filepath.Join(s.dir, string(k), id)
}

// get reads a record; fs.ErrNotExist when there is none.
func (s *store) get(k kind, id string) (record, error) {
	if !validID(id) {
		return record{}, fs.ErrNotExist
	}
	b, err := os.ReadFile(s.recordPath(k, id))
	if err != nil {
		return record{}, err
	}
	var r record
	if err := json.Unmarshal(b, &r); err != nil {
		return record{}, fmt.Errorf("%s %s: %w", k, id, err)
	}
	return r, nil
}

// list returns the records of a kind, by ID.
func (s *store) list(k kind) ([]record, error) {
	files, err := filepath.Glob(filepath.Join(s.dir, string(k), "*.json"))
	if err != nil {
		return nil, err
	}
	var rs []record
	for _, f := range files {
		r, err := s.get(k, strings.TrimSuffix(filepath.Base(f), ".json"))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	slices.SortFunc(rs, func(a, b record) int { return strings.Compare(a.ID, b.ID) })
	return rs, nil
}

// create makes r's data, a copy of from's when given (a volume's or a
// snapshot's data), at least r.Size bytes for a file, and then its
// record. A Block volume is put on a loop device.
func (s *store) create(k kind, r record, from string) (err error) {
	data := s.dataPath(k, r.ID, r.Block)
	// What a failed attempt left: a retry makes it anew.
	if err := s.removeData(k, r.ID, r.Block); err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, "tmp", string(k)+"-"+r.ID)
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(tmp)
			_ = s.removeData(k, r.ID, r.Block)
		}
	}()
	switch {
	case from != "":
		// Sparse, and a reflink where the file system has them: a
		// disk's holes stay holes.
		args := []string{"--sparse=always", "--reflink=auto", from, tmp}
		if !r.Block {
			args = append([]string{"-a"}, args...)
		}
		if out, err := exec.Command("cp", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("cp %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
	case r.Block:
		f, err := os.Create(tmp)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	default:
		if err := os.Mkdir(tmp, 0o777); err != nil {
			return err
		}
		// Open to the pods' users, whatever the umask, as
		// testnode's directories are.
		if err := os.Chmod(tmp, 0o777); err != nil {
			return err
		}
	}
	if r.Block {
		st, err := os.Stat(tmp)
		if err != nil {
			return err
		}
		if st.Size() < r.Size {
			if err := os.Truncate(tmp, r.Size); err != nil {
				return err
			}
		}
	}
	if err := os.Rename(tmp, data); err != nil {
		return err
	}
	if r.Block && k == volumes {
		if _, err := attachLoop(data); err != nil {
			return err
		}
	}
	return s.writeRecord(k, r)
}

// writeRecord writes r whole or not at all.
func (s *store) writeRecord(k kind, r record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	path := s.recordPath(k, r.ID)
	tmp := filepath.Join(s.dir, "tmp", string(k)+"-"+r.ID+".json")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// remove deletes a record and its data; nothing to delete is no error.
func (s *store) remove(k kind, id string) error {
	if !validID(id) {
		return nil
	}
	r, err := s.get(k, id)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	// The record first: a half-removed volume is no volume.
	if err := os.Remove(s.recordPath(k, id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return s.removeData(k, id, r.Block)
}

// removeData deletes the data of a volume or snapshot, detaching a Block
// volume's loop devices first.
func (s *store) removeData(k kind, id string, block bool) error {
	data := s.dataPath(k, id, block)
	if block && k == volumes {
		if err := detachLoops(data); err != nil {
			return err
		}
	}
	return os.RemoveAll(data)
}

// attachLoop puts file on a free loop device and returns the device.
func attachLoop(file string) (string, error) {
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup --find --show %s: %w: %s", file, err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// loopsOf lists the loop devices whose backing file is file.
func loopsOf(file string) ([]string, error) {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME", "--associated", file).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("losetup --associated %s: %w: %s", file, err, strings.TrimSpace(string(out)))
	}
	return strings.Fields(string(out)), nil
}

// loopOf is a loop device of file, attaching one when there is none.
func loopOf(file string) (string, error) {
	devs, err := loopsOf(file)
	if err != nil {
		return "", err
	}
	if len(devs) > 0 {
		return devs[0], nil
	}
	return attachLoop(file)
}

// detachLoops detaches the loop devices of file, after writing out what
// is cached of them. One still in use (a kubelet's stacked device) goes
// once released: the kernel clears it then.
func detachLoops(file string) error {
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	devs, err := loopsOf(file)
	if err != nil {
		return err
	}
	return detach(devs)
}

// flushLoops writes what the page cache holds of file's loop devices
// into file: a pod's writes to its device that it did not sync yet, which
// a copy of the file would miss.
func flushLoops(file string) error {
	devs, err := loopsOf(file)
	if err != nil {
		return err
	}
	for _, dev := range devs {
		f, err := os.Open(dev)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", dev, err)
		}
	}
	return nil
}

// detachLoopsBelow detaches every loop device backed by a file under dir:
// what Stop leaves of the store is nothing.
func detachLoopsBelow(dir string) error {
	devs, err := loopsBelow(dir)
	if err != nil {
		return err
	}
	return detach(devs)
}

// detach detaches the loop devices devs.
func detach(devs []string) error {
	var errs []error
	for _, dev := range devs {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("losetup --detach %s: %w: %s", dev, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// loopsBelow lists the loop devices backed by a file under dir.
func loopsBelow(dir string) ([]string, error) {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--raw", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		return nil, fmt.Errorf("losetup --list: %w", err)
	}
	var devs []string
	for _, line := range strings.Split(string(out), "\n") {
		// --raw writes a space in the file's name as \x20.
		name, back, ok := strings.Cut(line, " ")
		if ok && strings.HasPrefix(strings.ReplaceAll(back, `\x20`, " "), dir+"/") {
			devs = append(devs, name)
		}
	}
	return devs, nil
}
