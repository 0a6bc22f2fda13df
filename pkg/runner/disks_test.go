package runner

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/diskimport"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// TestCheckDisksFilled: a disk whose upload or import did not finish is
// not booted from; one filled, or never filled, is.
func TestCheckDisksFilled(t *testing.T) {
	data := t.TempDir()
	records := filepath.Join(data, runnerconfig.ImportRecordDir)
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
