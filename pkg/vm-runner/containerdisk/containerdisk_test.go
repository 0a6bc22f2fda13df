package containerdisk_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/containerdisk"
	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
)

func TestFind(t *testing.T) {
	dir := t.TempDir()
	_, err := containerdisk.Find(filepath.Join(dir, "disk"))
	require.EqualError(t, err, "the image has no "+filepath.Join(dir, "disk")+" directory: not a containerDisk image")
	_, err = containerdisk.Find(dir)
	require.EqualError(t, err, "the image's "+dir+" is empty: not a containerDisk image")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	_, err = containerdisk.Find(dir)
	require.EqualError(t, err, "the image's "+dir+" holds no disk file, only sub")

	file := filepath.Join(dir, "fedora.qcow2")
	require.NoError(t, os.WriteFile(file, []byte("QFI\xfb"), 0o644))
	got, err := containerdisk.Find(dir)
	require.NoError(t, err)
	require.Equal(t, file, got)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "README"), nil, 0o644))
	_, err = containerdisk.Find(dir)
	require.ErrorContains(t, err, "holds 2 files (")
}

func TestFetch(t *testing.T) {
	disk, records, scratch := t.TempDir(), t.TempDir(), t.TempDir()
	data := []byte("a disk image")
	require.NoError(t, os.WriteFile(filepath.Join(disk, "d.raw"), data, 0o440))
	o := containerdisk.Options{Dir: disk, To: filepath.Join(scratch, "root-disk.containerdisk"), RecordDir: records, Disk: "root-disk"}

	copied, err := containerdisk.Fetch(o)
	require.NoError(t, err)
	require.True(t, copied)
	got, err := os.ReadFile(o.To)
	require.NoError(t, err)
	require.Equal(t, data, got)
	entries, err := os.ReadDir(scratch)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file left")

	// Filled before: nothing to copy.
	require.NoError(t, os.Remove(o.To))
	require.NoError(t, diskimport.WriteRecord(records, diskimport.Record{Disk: "root-disk", Source: "quay.io/a:b", State: diskimport.StateDone}))
	copied, err = containerdisk.Fetch(o)
	require.NoError(t, err)
	require.False(t, copied)
	_, err = os.Stat(o.To)
	require.ErrorIs(t, err, os.ErrNotExist)

	// An import cut off: copy again.
	require.NoError(t, diskimport.WriteRecord(records, diskimport.Record{Disk: "root-disk", Source: "quay.io/a:b", State: diskimport.StateImporting}))
	copied, err = containerdisk.Fetch(o)
	require.NoError(t, err)
	require.True(t, copied)
}

func TestCopySelf(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "vm-runner")
	require.NoError(t, containerdisk.CopySelf(dest))
	fi, err := os.Stat(dest)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	self, err := os.Executable()
	require.NoError(t, err)
	want, err := os.Stat(self)
	require.NoError(t, err)
	require.Equal(t, want.Size(), fi.Size())
}
