package disk

import (
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
)

// Paths and names in the uploader pod.
const (
	// ComponentDiskUpload marks the uploader pod among the VM's objects.
	ComponentDiskUpload = "disk-upload"
	// DevicePath is where the uploader pod has a disk on a Block claim,
	// whichever it is.
	DevicePath    = "/dev/vm-disk"
	volumeDisk    = "disk"
	volumeScratch = "scratch"
)

// PodName is the name of the VM's uploader pod: one upload per VM at a
// time.
func PodName(vm string) string { return vm + "-" + ComponentDiskUpload }

// FilePath is where the uploader pod has a disk on a Filesystem claim:
// the claim's image file.
var FilePath = runnerconfig.DiskFile("vm-disk")

// diskPath is where the uploader pod has the target's disk.
func (t *target) diskPath() string {
	if t.claimSize > 0 {
		return FilePath
	}
	return DevicePath
}

// RecordDir is where the receiver keeps its records: the import records
// of the VM's runner data, which the VM's own import (vm-runner import)
// reads too.
var RecordDir = runnerconfig.ImportRecords(vmpod.DataDir)

// uploaderPod is the helper pod that holds the disk's claim for the
// upload (pkg/kubectl-vm/helperpod), with the VM's runner data for the
// records and scratch space for the staged image.
func uploaderPod(t *target) (*corev1.Pod, error) {
	disk := helperpod.Volume{Name: volumeDisk, Claim: t.claim, Path: DevicePath, Block: true}
	if t.claimSize > 0 {
		disk.Path, disk.Block = path.Dir(FilePath), false
	}
	return helperpod.New(t.sts, PodName(t.sts.Name), ComponentDiskUpload, []helperpod.Volume{
		disk,
		{Name: render.VolumeRunnerData, Claim: helperpod.ClaimName(t.sts, render.VolumeRunnerData), Path: vmpod.DataDir},
		{Name: volumeScratch, Path: vmpod.ImportScratchDir},
	})
}

// receiveCommand is what runs in the uploader pod: vm-runner disk
// receive for size bytes of the file called name.
func receiveCommand(t *target, name string, size int64, force bool) []string {
	cmd := []string{"vm-runner", "disk", "receive",
		"--disk", t.disk,
		"--device", t.diskPath(),
		"--records", RecordDir,
		"--scratch", vmpod.ImportScratchDir,
		"--size", strconv.FormatInt(size, 10),
		"--name", name,
	}
	if t.claimSize > 0 {
		cmd = append(cmd, "--claim-size", strconv.FormatInt(t.claimSize, 10))
	}
	if force {
		cmd = append(cmd, "--force")
	}
	return cmd
}
