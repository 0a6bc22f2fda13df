// Package machineid gives a cloned Linux guest a machine id of its own,
// on its disk before its first boot, as virt-sysprep's machine-id
// operation does: systemd reads /etc/machine-id early, and derives from it
// the DHCP client id, the journal's directory and more, so two guests with
// one id clash on a network they share.
package machineid

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"regexp"

	diskfs "github.com/diskfs/go-diskfs"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/ext4"
)

// Files hold the machine id: systemd's, and D-Bus's (a copy on older
// guests; a link to systemd's on newer ones).
var Files = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

// Changed is a file given a new machine id: on the disk's partition
// (0: the disk holds a file system without a partition table).
type Changed struct {
	Partition int
	File      string
}

func (c Changed) String() string {
	if c.Partition == 0 {
		return c.File
	}
	return fmt.Sprintf("%s on partition %d", c.File, c.Partition)
}

var idPattern = regexp.MustCompile(`^[0-9a-f]{32}\n$`)

// Renew writes a new random machine id over the old one in each ext4
// file system of disk (a raw image file or a block device) that has one.
// It writes the new id in place of the old, of the same length, so only
// the file's data block changes: no metadata, nothing the file system's
// journal could replay over. A file system without an id (none, empty or
// "uninitialized") is left as it is: systemd makes one at its first boot.
func Renew(disk string) ([]Changed, error) {
	d, err := diskfs.Open(disk, diskfs.WithOpenMode(diskfs.ReadWrite))
	if err != nil {
		return nil, fmt.Errorf("opening disk %s: %w", disk, err)
	}
	defer d.Close()
	// The whole disk (0), or each partition.
	type span struct{ start, size int64 }
	spans := []span{{0, d.Size}}
	if table, err := d.GetPartitionTable(); err == nil {
		spans = []span{{}}
		for _, p := range table.GetPartitions() {
			spans = append(spans, span{p.GetStart(), p.GetSize()})
		}
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	newID := []byte(hex.EncodeToString(id) + "\n")
	var changed []Changed
	for p, sp := range spans {
		if sp.size == 0 || !isExt4(d.Backend, sp.start) {
			continue
		}
		fs, err := ext4.Read(d.Backend, sp.size, sp.start, d.LogicalBlocksize)
		if err != nil {
			continue
		}
		var oldID []byte
		for _, name := range Files {
			done, err := rewrite(fs, name, oldID, newID)
			if err != nil {
				return changed, fmt.Errorf("disk %s, partition %d: %s: %w", disk, p, name, err)
			}
			if done == nil {
				continue
			}
			if oldID == nil {
				oldID = done
			}
			changed = append(changed, Changed{Partition: p, File: name})
		}
	}
	return changed, nil
}

// isExt4 tells an ext2, 3 or 4 file system at start by its superblock's
// magic number, so that no other parser reads what the guest wrote.
func isExt4(r io.ReaderAt, start int64) bool {
	magic := make([]byte, 2)
	_, err := r.ReadAt(magic, start+1024+56)
	return err == nil && magic[0] == 0x53 && magic[1] == 0xef
}

// rewrite writes newID over name's id when it holds one (oldID, if not
// nil: a copy of it, not a link already rewritten) and returns the id it
// held.
func rewrite(fs filesystem.FileSystem, name string, oldID, newID []byte) ([]byte, error) {
	f, err := fs.OpenFile(name, os.O_RDWR)
	if err != nil {
		return nil, nil // no such file: nothing to renew
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64))
	if err != nil {
		return nil, err
	}
	if !idPattern.Match(b) || (oldID != nil && string(b) != string(oldID)) {
		return nil, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	if _, err := f.Write(newID); err != nil {
		return nil, err
	}
	return b, nil
}
