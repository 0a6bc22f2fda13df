package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmsnapshot"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// TestSnapshots: kubectl vm snapshot, restore and snapshot list/delete
// on the node's local Block volumes (no CSI snapshots), with the guest
// writing synced records throughout: an online snapshot holds every
// record acknowledged before the guest's freeze and none begun after its
// thaw; a restore brings the disks back to exactly that (the guest goes
// on after the snapshot's last record), keeps the machine's uuid, and
// leaves no snapshot of its own; a stopped VM is snapshotted by a copy;
// --keep deletes the oldest, and delete deletes the claims too.
func TestSnapshots(t *testing.T) {
	const ns, vm = "snapshots", "snapped"
	installVmop(t)
	createNamespace(t, ns)
	addImageRepository(t, ns)
	addGuestDisk(t, ns, vm, append(recordWriter(), testguest.Agent)...)
	// Small requests: the clone runs beside it on the node's 2 CPUs.
	manifest, _ := withRecordsDisk(t, ns, vm, strings.Replace(fmt.Sprintf(guestVM, vm, ns),
		"spec:\n  vm:\n", "spec:\n  resources:\n    requests:\n      cpu: 100m\n  vm:\n", 1))
	// A second records disk, an image file on a Filesystem claim.
	fsRecords := ns + "-" + vm + "-fs-records"
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: fsRecords, Size: resource.MustParse("128Mi"), Labels: map[string]string{"disk": fsRecords},
	}))
	manifest = strings.Replace(manifest, "    - cdrom:\n", diskClaim("fs-records", testnode.StorageClassFilesystem, "Filesystem", fsRecords, "128Mi")+"    - cdrom:\n", 1)
	// The snapshots' claims: s1, the restore's own, s2; the clones'.
	for i := range 5 {
		for _, size := range []string{"48Mi", "128Mi"} {
			require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
				Name: fmt.Sprintf("%s-copy-%d-%s", ns, i, strings.ToLower(size)), Size: resource.MustParse(size),
			}))
		}
		require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
			Name: fmt.Sprintf("%s-copy-%d-dir", ns, i), Size: resource.MustParse("128Mi"),
		}))
	}
	kubectl(t, manifest, "apply", "-f", "-")
	deleted := false
	defer func() {
		if !deleted {
			deleteVM(t, ns, vm)
		}
	}()
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	waitConsole(t, ns, vm, testguest.RecordPrefix+"3", 2*time.Minute)
	uuid := machineUUID(t, ns, vm)

	// Online.
	out := kubectl(t, "", "vm", "snapshot", "-n", ns, vm, "--name", "s1")
	require.Regexp(t, `^snapshot s1 of vm snapshots/snapped taken in [0-9.]+s: 3 disks, 304 MiB; consistent, the guest frozen for 0\.[0-9]+s\n$`, out)
	t.Logf("online snapshot: %s", strings.TrimSpace(out))
	requireEvents(t, ns, "vm/"+vm, "Frozen", "Thawed", "SnapshotTaken")
	before, after := frozenRecords(t, ns, vm)
	requireCopyHolds(t, ns, vmsnapshot.ClaimName(vm, "s1", "records-disk"), before, after+1)
	requireCopyHolds(t, ns, vmsnapshot.ClaimName(vm, "s1", "fs-records-disk"), before, after+1)
	require.Regexp(t, `(?m)^snapped\s+s1\s+Ready\s+copy\s+consistent\s+3\s+304 MiB\s+`, kubectl(t, "", "vm", "snapshot", "list", "-n", ns, vm))

	// Records on, then back to s1.
	out, next := restoreOnRecords(t, ns, vm, "s1", uuid, before, after)
	t.Logf("restore: %s", out)
	list := kubectl(t, "", "vm", "snapshot", "list", "-n", ns, vm)
	require.NotContains(t, list, vmsnapshot.BeforeRestorePrefix, "the restore's own snapshot is deleted")

	// A clone of s1 boots beside it: the same records, its own uuid.
	const twin = "twin"
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: ns + "-" + twin + "-data", Size: resource.MustParse("16Mi")}))
	out = kubectl(t, "", "vm", "clone", "-n", ns, vm, twin, "--snapshot", "s1")
	require.Equal(t, "vm snapshots/twin cloned from snapshot s1 of snapped\n", out)
	defer deleteVM(t, ns, twin)
	twinNext := requireResumed(t, ns, twin, before)
	require.LessOrEqual(t, twinNext, after+1)
	require.NotEqual(t, uuid, machineUUID(t, ns, twin), "the clone's machine uuid")
	require.Equal(t, uuid, machineUUID(t, ns, vm))
	waitConsole(t, ns, vm, testguest.RecordPrefix+fmt.Sprint(next+2), time.Minute)

	// Stopped: a copy; --keep 1 deletes s1 with its claims.
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
	out = kubectl(t, "", "vm", "snapshot", "-n", ns, vm, "--name", "s2", "--keep", "1")
	require.Regexp(t, `^snapshot s2 of vm snapshots/snapped taken in [0-9.]+s: 3 disks, 304 MiB; stopped\nsnapshot s1 of vm snapshots/snapped deleted \(--keep 1\)\n$`, out)
	requireClaimGone(t, ns, vmsnapshot.ClaimName(vm, "s1", "records-disk"))

	// The VM deleted, its snapshots stay, and can be cloned.
	deleteVM(t, ns, vm)
	deleted = true
	require.Regexp(t, `(?m)^snapped\s+s2\s+Ready\s+copy\s+stopped\s+3\s+`, kubectl(t, "", "vm", "snapshot", "list", "-n", ns))
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: ns + "-heir-data", Size: resource.MustParse("16Mi")}))
	out = kubectl(t, "", "vm", "clone", "-n", ns, vm, "heir", "--snapshot", "s2", "-o", "yaml")
	require.Contains(t, out, "kind: VirtualMachine\nmetadata:\n")
	require.Contains(t, out, "  name: heir\n")
	for _, claim := range []string{"system-disk-heir-0", "records-disk-heir-0", "fs-records-disk-heir-0", "runner-data-heir-0"} {
		c, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
		require.NoError(t, err, "the clone's claims are made with -o yaml too")
		require.Equal(t, corev1.ClaimBound, c.Status.Phase, claim)
	}
	kubectl(t, "", "vm", "snapshot", "delete", "-n", ns, vm, "s2")
	requireClaimGone(t, ns, vmsnapshot.ClaimName(vm, "s2", "system-disk"))
}

// requireCopyHolds requires that the snapshot's claim of a records disk
// (a Block volume, or a Filesystem one with the image file) holds records
// 1 to upTo and not record not.
func requireCopyHolds(t *testing.T, ns, claim string, upTo, not int) {
	t.Helper()
	c, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	require.NoError(t, err)
	file := node.DiskFile(c.Spec.VolumeName)
	if *c.Spec.VolumeMode == corev1.PersistentVolumeFilesystem {
		file = filepath.Join(node.VolumePath(c.Spec.VolumeName), vmpod.DiskFileName)
	}
	requireRecordsIn(t, file, upTo, not)
}

// requireRecordsIn requires that file, a records disk's bytes, holds
// records 1 to upTo and not record not.
func requireRecordsIn(t *testing.T, file string, upTo, not int) {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	lost, err := testguest.LostRecords(f, not)
	require.NoError(t, err)
	for _, l := range lost {
		require.Greater(t, l, upTo, "record %d, acknowledged before the freeze, is not in the snapshot", l)
	}
	require.Contains(t, lost, not, "record %d, begun after the thaw, is in the snapshot", not)
}

func requireClaimGone(t *testing.T, ns, claim string) {
	t.Helper()
	eventually.Within(t, time.Minute, func() string {
		_, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("claim %s is still there (%v)", claim, err)
	})
}

// machineUUID is the SMBIOS uuid the VM's runner keeps in its data.
func machineUUID(t *testing.T, ns, vm string) string {
	t.Helper()
	c, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "runner-data-"+vm+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	b, err := os.ReadFile(node.VolumePath(c.Spec.VolumeName) + "/uuid.txt")
	require.NoError(t, err)
	return string(b)
}

// restoreOnRecords lets the guest write a few records past the snapshot
// snap's last one (after), then restores vm to snap and requires the
// guest to go on from the snapshot's records (acknowledged before its
// freeze) with its machine's uuid. It returns kubectl vm restore's output
// and the record the guest goes on after.
func restoreOnRecords(t *testing.T, ns, vm, snap, uuid string, before, after int) (out string, next int) {
	t.Helper()
	waitConsole(t, ns, vm, testguest.RecordPrefix+fmt.Sprint(after+5), 2*time.Minute)
	out = kubectl(t, "", "vm", "restore", "-n", ns, vm, snap)
	require.Contains(t, out, "vm "+ns+"/"+vm+" restored to snapshot "+snap+" in ")
	next = requireResumed(t, ns, vm, before)
	require.LessOrEqual(t, next, after+1, "the guest goes on after the snapshot's last record, not the disk's before the restore")
	require.Equal(t, uuid, machineUUID(t, ns, vm), "the machine's uuid")
	return out, next
}

// frozenRecords reads the guest's console for its freeze: the last
// record it acknowledged before the freeze, and the last one it began
// before the thaw (after it, records are not in a snapshot).
func frozenRecords(t *testing.T, ns, vm string) (before, after int) {
	t.Helper()
	console, err := consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	frozeAt, thawedAt := strings.Index(console, testguest.FrozenLine), strings.Index(console, testguest.ThawedLine)
	require.Positive(t, frozeAt)
	require.Greater(t, thawedAt, frozeAt)
	before, after = testguest.AckedRecords(console[:frozeAt]), testguest.AckedRecords(console[:thawedAt])+1
	t.Logf("records acknowledged before the freeze: %d; after the thaw: from %d", before, after+1)
	return before, after
}
