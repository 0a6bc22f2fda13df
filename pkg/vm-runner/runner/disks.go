package runner

import (
	"fmt"
	"time"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/diskfile"
	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
)

// checkDisksFilled refuses to boot from a disk whose filling from an image
// (vm-runner import, kubectl vm disk upload) began and did not end: it
// holds part of an image. That is an upload running now, or one cut off,
// or an import whose source was then removed; an import with its source
// is done again by the pod's init container before the runner starts.
func checkDisksFilled(vm *runnerconfig.VM, dataDir string) error {
	dir := runnerconfig.ImportRecords(dataDir)
	for _, d := range vm.Drives {
		if d.Type != runnerconfig.DriveRaw || d.Resource == "" {
			continue
		}
		disk := d.RecordName()
		rec, err := diskimport.ReadRecord(dir, disk)
		if err != nil {
			return err
		}
		if rec != nil && rec.State == diskimport.StateImporting {
			return fmt.Errorf("disk %s may hold part of an image: filling it from %s began at %s and did not finish "+
				"(an upload still running, or one cut off: run kubectl vm disk upload again)",
				disk, rec.Source, rec.Started.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// ensureDiskFiles makes or grows the image files of the disks on
// Filesystem claims, which qemu opens as they are.
func ensureDiskFiles(vm *runnerconfig.VM) error {
	for _, d := range vm.Drives {
		if d.Type == runnerconfig.DriveRaw && d.ClaimSize > 0 {
			if _, err := diskfile.Ensure(d.Resource, d.ClaimSize); err != nil {
				return fmt.Errorf("disk %s: %w", d.RecordName(), err)
			}
		}
	}
	return nil
}
