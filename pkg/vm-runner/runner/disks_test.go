package runner

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
	"github.com/vmop/vmop/pkg/vmpod"
)

// TestCheckDisksFilled: a disk whose upload or import did not finish is
// not booted from; one filled, or never filled, is.
func TestCheckDisksFilled(t *testing.T) {
	data := t.TempDir()
	records := filepath.Join(data, vmpod.ImportRecordDir)
	vm := &runnerconfig.VM{Drives: []runnerconfig.Drive{
		{Type: runnerconfig.DriveRaw, Resource: "/dev/system-disk"},
		{Type: runnerconfig.DriveRaw, Resource: "/dev/data-disk"},
		{Type: runnerconfig.DriveCDROM, File: "debian.iso"},
	}}
	require.NoError(t, checkDisksFilled(vm, data), "no records")
	require.NoError(t, diskimport.WriteRecord(records, diskimport.Record{Disk: "system-disk", Source: "upload:a.qcow2", State: diskimport.StateDone}))
	require.NoError(t, checkDisksFilled(vm, data), "a disk filled")

	started := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	require.NoError(t, diskimport.WriteRecord(records, diskimport.Record{Disk: "data-disk", Source: "upload:b.raw", State: diskimport.StateImporting, Started: started}))
	require.EqualError(t, checkDisksFilled(vm, data), "disk data-disk may hold part of an image: filling it from upload:b.raw began at 2026-11-24T12:00:00Z "+
		"and did not finish (an upload still running, or one cut off: run kubectl vm disk upload again)")
}

// TestEnsureDiskFiles: a disk on a Filesystem claim gets its image file
// before qemu opens it, and the file's import record goes by the disk's
// volume name, not by "disk.img".
func TestEnsureDiskFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "scratch-disk")
	require.NoError(t, os.Mkdir(dir, 0o700))
	file := filepath.Join(dir, vmpod.DiskFileName)
	vm := &runnerconfig.VM{Drives: []runnerconfig.Drive{
		{Type: runnerconfig.DriveRaw, Resource: "/dev/system-disk"},
		{Type: runnerconfig.DriveRaw, Resource: file, ClaimSize: 8 << 20},
	}}
	require.NoError(t, ensureDiskFiles(vm))
	fi, err := os.Stat(file)
	require.NoError(t, err)
	require.EqualValues(t, 8<<20, fi.Size())
	require.Equal(t, "scratch-disk", vm.Drives[1].RecordName())

	vm.Drives[1].Resource = filepath.Join(dir, "missing", vmpod.DiskFileName)
	require.ErrorContains(t, ensureDiskFiles(vm), "disk missing: disk file ")
}
