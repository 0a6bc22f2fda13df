package node

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// pausedPhase is kubectl vm status's line of a paused VM.
var pausedPhase = regexp.MustCompile(`(?m)^Status:\s+Paused: `)

// fullDisk: a guest writing synced records to a disk whose volume runs
// out of room (a Filesystem claim on a file system that other files
// fill, as a thin volume) is paused, not handed I/O errors; kubectl vm
// status and an Event name the disk and say what to do; once room is
// freed the guest goes on by itself, and every record it was told is
// synced is on the disk.
func fullDisk(t *testing.T, ns string) {
	const vm, records = "filler", 128 // 8 MiB
	addGuestDisk(t, ns, vm, testguest.Records(records))
	data := ns + "-" + vm + "-records"
	// Larger than the runner's data volume, which the pod's other claim
	// (of the same class, selecting none) would take otherwise.
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: data, Size: resource.MustParse("32Mi"), Space: resource.MustParse("12Mi"), Labels: map[string]string{"disk": data},
	}))
	// The disk's file, sparse, is there before the VM starts; then other
	// files take all of the room but 1 MiB.
	dir := node.VolumePath(data)
	disk := filepath.Join(dir, runnerconfig.DiskFileName)
	require.NoError(t, os.WriteFile(disk, nil, 0o666))
	require.NoError(t, os.Chmod(disk, 0o666))
	require.NoError(t, os.Truncate(disk, records*testguest.RecordSize))
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	ballast := filepath.Join(dir, "other-files")
	require.NoError(t, os.WriteFile(ballast, make([]byte, int64(st.Bavail)*st.Bsize-1<<20), 0o644))

	manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "    - cdrom:\n", fmt.Sprintf(`    - volumeClaimTemplate:
        metadata:
          name: records
        spec:
          storageClassName: %s
          volumeMode: Filesystem
          selector:
            matchLabels:
              disk: %s
          resources:
            requests:
              storage: 8Mi
    - cdrom:
`, testnode.StorageClassFilesystem, data), 1)
	kubectl(t, manifest, "apply", "-f", "-")
	defer deleteVM(t, ns, vm)
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")

	var status string
	eventually.Within(t, 2*time.Minute, func() string {
		status = kubectl(t, "", "vm", "status", "-n", ns, vm)
		if pausedPhase.MatchString(status) && regexp.MustCompile(`Paused\s+True\s+DiskFull`).MatchString(status) {
			return ""
		}
		return "kubectl vm status:\n" + status
	})
	t.Logf("kubectl vm status of the paused VM:\n%s", status)
	require.Contains(t, status, "disk disk1 (spec.vm.disks[1]) is full (No space left on device)")
	requireEvents(t, ns, "vm/"+vm, "DiskFull", "spec.vm.disks[1]", "free space on its volume or grow its claim")
	log, err := consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	atPause := testguest.AckedRecords(log)
	require.Less(t, atPause, records, "the guest wrote every record to a full volume")

	// Room again: the guest goes on by itself.
	freed := time.Now()
	require.NoError(t, os.Remove(ballast))
	waitConsole(t, ns, vm, testguest.RecordsDoneLine, 2*time.Minute)
	resumed := time.Since(freed)
	requireEvents(t, ns, "vm/"+vm, "DiskResumed", "spec.vm.disks[1]")
	eventually.Within(t, time.Minute, func() string {
		if out := kubectl(t, "", "vm", "status", "-n", ns, vm); pausedPhase.MatchString(out) {
			return "kubectl vm status still says Paused:\n" + out
		}
		return ""
	})

	log, err = consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	require.NotContains(t, log, " failed", "the guest saw a write fail")
	require.NotContains(t, log, "I/O error", "the guest's kernel saw an I/O error")
	require.Equal(t, records, testguest.AckedRecords(log))
	f, err := os.Open(disk)
	require.NoError(t, err)
	defer f.Close()
	lost, err := testguest.LostRecords(f, records)
	require.NoError(t, err)
	require.Empty(t, lost, "records the guest synced that are not on the disk")
	t.Logf("full disk: paused after %d of %d records; going on %.1f s after room was freed; %d records written, 0 lost",
		atPause, records, resumed.Seconds(), records)
}
