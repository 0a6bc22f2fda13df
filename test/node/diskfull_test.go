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

	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// pausedPhase is kubectl vm status's line of a paused VM.
var pausedPhase = regexp.MustCompile(`(?m)^Status:\s+Paused: `)

// fullDisk: a guest writing synced records to two disks whose volumes
// run out of room, a thin Block volume (a loop device on a sparse file
// whose file system other files fill) and then a Filesystem claim (its
// file system filled alike), is paused, not handed I/O errors; kubectl vm
// status and an Event name the disk and say what to do; once room is
// freed the guest goes on by itself, and every record it was told is
// synced is on both disks.
func fullDisk(t *testing.T, ns string) {
	const vm, records = "filler", 128 // 8 MiB
	addGuestDisk(t, ns, vm, testguest.Records(records))
	data, thin := ns+"-"+vm+"-records", ns+"-"+vm+"-thin"
	// Larger than the runner's data volume, which the pod's other claim
	// (of the same class, selecting none) would take otherwise.
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: data, Size: resource.MustParse("32Mi"), Space: resource.MustParse("12Mi"), Labels: map[string]string{"disk": data},
	}))
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
		Name: thin, Size: resource.MustParse("8Mi"), Space: resource.MustParse("12Mi"), Labels: map[string]string{"disk": thin},
	}))
	// The Filesystem disk's file, sparse, is there before the VM starts;
	// then other files take all of the room but 1 MiB, and of the thin
	// volume's all but 512 KiB: it fills first.
	dir := node.VolumePath(data)
	disk := filepath.Join(dir, vmpod.DiskFileName)
	require.NoError(t, os.WriteFile(disk, nil, 0o666))
	require.NoError(t, os.Chmod(disk, 0o666))
	require.NoError(t, os.Truncate(disk, records*testguest.RecordSize))
	ballast := fill(t, node.SpaceDir(data), 1<<20)
	thinBallast := fill(t, node.SpaceDir(thin), 512<<10)

	manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "    - cdrom:\n",
		diskClaim("records", testnode.StorageClassFilesystem, "Filesystem", data, "8Mi")+
			diskClaim("thin", testnode.StorageClassBlock, "Block", thin, "8Mi")+"    - cdrom:\n", 1)
	kubectl(t, manifest, "apply", "-f", "-")
	defer deleteVM(t, ns, vm)
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")

	// The thin Block volume fills first.
	status := waitPaused(t, ns, vm, "disk disk2 (spec.vm.disks[2]) is full (No space left on device)")
	t.Logf("kubectl vm status of the paused VM:\n%s", status)
	requireEvents(t, ns, "vm/"+vm, "DiskFull", "disk disk2 (spec.vm.disks[2]) is full", "free space on its volume or grow its claim")
	log, err := consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	atThin := testguest.AckedRecords(log)
	require.Less(t, atThin, records, "the guest wrote every record to a full volume")

	// Room again on it: the guest goes on by itself, until the
	// Filesystem volume is full (maybe within the runner's check that it
	// goes on: then the pause moves from one disk to the other).
	freed := time.Now()
	require.NoError(t, os.Remove(thinBallast))
	waitPaused(t, ns, vm, "disk disk1 (spec.vm.disks[1]) is full (No space left on device)")
	resumedThin := time.Since(freed)
	requireEvents(t, ns, "vm/"+vm, "disk disk1 (spec.vm.disks[1]) is full")
	log, err = consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	atPause := testguest.AckedRecords(log)
	require.Less(t, atPause, records, "the guest wrote every record to a full volume")

	freed = time.Now()
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
	for _, file := range []string{disk, node.DiskFile(thin)} {
		f, err := os.Open(file)
		require.NoError(t, err)
		lost, err := testguest.LostRecords(f, records)
		require.NoError(t, f.Close())
		require.NoError(t, err)
		require.Empty(t, lost, "records the guest synced that are not on %s", file)
	}
	t.Logf("full disks: paused after %d of %d records on the thin Block volume, on the full Filesystem volume %.1f s after room was freed there; "+
		"paused after %d on the Filesystem volume, going on %.1f s after room was freed; %d records written to each, 0 lost",
		atThin, records, resumedThin.Seconds(), atPause, resumed.Seconds(), records)
}

// waitPaused waits until kubectl vm status says the VM is paused because
// a disk is full, with why, and returns what it says.
func waitPaused(t *testing.T, ns, vm, why string) string {
	t.Helper()
	var status string
	eventually.Within(t, 2*time.Minute, func() string {
		status = kubectl(t, "", "vm", "status", "-n", ns, vm)
		if pausedPhase.MatchString(status) && regexp.MustCompile(`Paused\s+True\s+DiskFull`).MatchString(status) && strings.Contains(status, why) {
			return ""
		}
		return "kubectl vm status:\n" + status
	})
	return status
}

// fill writes a file into dir that leaves it leave bytes of room, and
// returns its path.
func fill(t *testing.T, dir string, leave int64) string {
	t.Helper()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	ballast := filepath.Join(dir, "other-files")
	require.NoError(t, os.WriteFile(ballast, make([]byte, int64(st.Bavail)*st.Bsize-leave), 0o644))
	return ballast
}
