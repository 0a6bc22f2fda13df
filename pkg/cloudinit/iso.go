package cloudinit

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	diskfile "github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"
)

// VolumeLabel is the label by which cloud-init finds a NoCloud seed.
const VolumeLabel = "cidata"

const (
	isoSector = 2048
	// Sectors besides file data: system area (16), primary volume
	// descriptor and terminator (2), path tables L and M (2), the root
	// directory with its Rock Ridge entries and continuation area (up to
	// 4), and headroom.
	isoOverheadSectors = 16 + 2 + 2 + 4 + 8
	// The primary volume descriptor is sector 16; its volume space size
	// (little-endian uint32, in sectors) is at byte 80.
	pvdVolumeSizeOffset = 16*isoSector + 80
)

// WriteISO writes the seed as an ISO9660 image with Rock Ridge names
// (plain ISO9660 names would be META_DAT.;1, which cloud-init does not
// find). meta-data and user-data are always present, as NoCloud
// requires; network-config only when not empty. An existing file at path
// is replaced atomically, so qemu never sees half an image. d is written
// as it is: call Default first.
func WriteISO(path string, d Data) error {
	tmp := path + ".tmp"
	// diskfs.Create refuses existing files; a stale one is from a crash.
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := writeISO(tmp, d); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

func writeISO(path string, d Data) error {
	type file struct {
		name string
		data []byte
	}
	files := []file{{MetaDataFile, d.MetaData}, {UserDataFile, d.UserData}}
	if len(d.NetworkConfig) > 0 {
		files = append(files, file{NetworkConfigFile, d.NetworkConfig})
	}
	sectors := int64(isoOverheadSectors)
	for _, f := range files {
		sectors += (int64(len(f.data)) + isoSector - 1) / isoSector
	}

	// The iso9660 package alone, not the diskfs root: that one links
	// every file system and compressor into the runner (megabytes of RSS).
	img, err := diskfile.CreateFromPath(path, sectors*isoSector)
	if err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	defer img.Close()
	// The work area goes next to the image rather than into $TMPDIR,
	// which may be small or read-only in a pod.
	work, err := os.MkdirTemp(filepath.Dir(path), ".cidata-")
	if err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	defer os.RemoveAll(work)
	// Rock Ridge records the root directory's mode from the work area.
	if err := os.Chmod(work, 0o755); err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	iso, err := iso9660.Create(img, sectors*isoSector, 0, isoSector, work)
	if err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	for _, f := range files {
		if err := writeFile(iso, "/"+f.name, f.data); err != nil {
			return fmt.Errorf("cloud-init seed: %s: %w", f.name, err)
		}
	}
	if err := iso.Finalize(iso9660.FinalizeOptions{RockRidge: true, VolumeIdentifier: VolumeLabel}); err != nil {
		return fmt.Errorf("cloud-init seed: %w", err)
	}
	return checkSize(path, sectors)
}

func writeFile(fsys filesystem.FileSystem, name string, data []byte) error {
	f, err := fsys.OpenFile(name, os.O_CREATE|os.O_RDWR)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// checkSize makes sure the image fits what was allocated (go-diskfs
// would silently grow the file otherwise), trims it to the volume's
// size and syncs it before it is renamed into place.
func checkSize(path string, allocated int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [4]byte
	if _, err := f.ReadAt(b[:], pvdVolumeSizeOffset); err != nil {
		return fmt.Errorf("cloud-init seed: reading volume size: %w", err)
	}
	used := int64(binary.LittleEndian.Uint32(b[:]))
	if used == 0 || used > allocated {
		return fmt.Errorf("cloud-init seed: volume of %d sectors, %d allocated", used, allocated)
	}
	if err := f.Truncate(used * isoSector); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	return f.Close()
}
