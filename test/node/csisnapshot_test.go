package node

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmsnapshot"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/csidriver"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// TestSnapshotsCSI: kubectl vm snapshot, restore and clone on storage
// whose CSI driver takes snapshots, with the real snapshot-controller,
// csi-snapshotter and csi-provisioner (and the tests' own driver, on the
// node's loop devices), every disk of the VM on it (Block and
// Filesystem claims), the guest writing synced records throughout: the
// snapshot is a VolumeSnapshot per disk, cut while the guest was frozen;
// each holds every record acknowledged before the freeze and none begun
// after the thaw; a restore makes the claims anew from them and the guest
// goes on after the snapshot's last record; a clone boots from them with
// its own uuid and MAC, and both answer on the pod network; --keep and delete delete the VolumeSnapshots and the
// driver's snapshots.
func TestSnapshotsCSI(t *testing.T) {
	const ns, vm = "csisnaps", "cs"
	drv, err := csidriver.Start(t.Context(), node)
	require.NoError(t, err)
	defer func() { require.NoError(t, drv.Stop()) }()
	installVmop(t)
	createNamespace(t, ns)
	addImageRepository(t, ns)
	for _, name := range []string{vm, "cstwin"} {
		require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: ns + "-" + name + "-data", Size: resource.MustParse("16Mi")}))
	}
	// Every disk of the class of the CSI driver; small requests, as the
	// clone runs beside it on the node's 2 CPUs.
	manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "spec:\n  vm:\n", "spec:\n  resources:\n    requests:\n      cpu: 100m\n  vm:\n", 1)
	manifest = strings.Replace(manifest, fmt.Sprintf("storageClassName: local-block\n          selector:\n            matchLabels:\n              disk: %s-%s\n", ns, vm),
		"storageClassName: "+csidriver.StorageClass+"\n", 1)
	// And a disk of 2 GiB with 600 MiB of data, for the figures.
	manifest = strings.Replace(manifest, "    - cdrom:\n", csiDisk("records", "Block")+csiDisk("fs-records", "Filesystem")+
		diskClaim("bulk", csidriver.StorageClass, "Block", "", "2Gi")+"    - cdrom:\n", 1)
	// On the pod network, with a MAC of its own that the clone must not
	// share.
	manifest = strings.Replace(manifest, "    disks:\n", "    networks:\n    - pod: {mac: \"02:00:00:00:0c:51\"}\n    disks:\n", 1)
	require.Contains(t, manifest, "storageClassName: "+csidriver.StorageClass+"\n          resources")
	kubectl(t, manifest, "apply", "-f", "-")
	deleted := false
	defer func() {
		if !deleted {
			deleteVM(t, ns, vm)
		}
	}()
	kubectl(t, "", "vm", "disk", "upload", "-n", ns, vm, "--disk", "system", "--image", testguest.Disk(t, append(recordWriter(), testguest.Agent, testguest.DHCP)...))
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	waitConsole(t, ns, vm, testguest.RecordPrefix+"3", 2*time.Minute)
	uuid := machineUUID(t, ns, vm)
	bulk := fillBulk(t, drv, ns, "bulk-disk-"+vm+"-0")

	// Online: a VolumeSnapshot per disk, cut while frozen.
	out := kubectl(t, "", "vm", "snapshot", "-n", ns, vm, "--name", "c1")
	require.Regexp(t, `^snapshot c1 of vm csisnaps/cs taken in [0-9.]+s: 4 disks, 2352 MiB; consistent, the guest frozen for [0-9.]+s\n$`, out)
	t.Logf("online CSI snapshot: %s", strings.TrimSpace(out))
	requireEvents(t, ns, "vm/"+vm, "Frozen", "Thawed")
	before, after := frozenRecords(t, ns, vm)
	for _, disk := range []string{"records-disk", "fs-records-disk"} {
		requireRecordsIn(t, snapshotData(t, drv, ns, vmsnapshot.ClaimName(vm, "c1", disk)), before, after+1)
	}
	require.Equal(t, bulk, bulkSum(t, snapshotData(t, drv, ns, vmsnapshot.ClaimName(vm, "c1", "bulk-disk"))), "the 600 MiB in the snapshot")
	require.Regexp(t, `(?m)^cs\s+c1\s+Ready\s+csi\s+consistent\s+4\s+2352 MiB\s+`, kubectl(t, "", "vm", "snapshot", "list", "-n", ns, vm))

	// Records on, then back to c1: the claims made anew from it.
	out, next := restoreOnRecords(t, ns, vm, "c1", uuid, before, after)
	t.Logf("CSI restore (disks of 48 MiB, 2x128 MiB and 2 GiB with 600 MiB of data): %s", out)
	claim, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), "records-disk-cs-0", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, vmsnapshot.ClaimName(vm, "c1", "records-disk"), claim.Spec.DataSource.Name, "the restored claim is made from the VolumeSnapshot")
	require.NotContains(t, kubectl(t, "", "vm", "snapshot", "list", "-n", ns, vm), vmsnapshot.BeforeRestorePrefix, "the restore's own snapshot is deleted")

	// A clone of c1 boots beside it: the same records, its own uuid.
	const twin = "cstwin"
	require.Equal(t, "vm csisnaps/cstwin cloned from snapshot c1 of cs\n", kubectl(t, "", "vm", "clone", "-n", ns, vm, twin, "--snapshot", "c1"))
	defer deleteVM(t, ns, twin)
	require.LessOrEqual(t, requireResumed(t, ns, twin, before), after+1)
	require.NotEqual(t, uuid, machineUUID(t, ns, twin), "the clone's machine uuid")
	mac := kubectl(t, "", "get", "vm", "-n", ns, twin, "-o", "jsonpath={.spec.vm.networks[0].pod.mac}")
	require.NotEqual(t, "02:00:00:00:0c:51", mac, "the clone's MAC")
	// Both answer on the pod network: the runner's DHCP server gave
	// each guest its lease (it answers only the NIC's MAC).
	waitConsole(t, ns, twin, testguest.EchoLine, 2*time.Minute)
	for _, name := range []string{vm, twin} {
		pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), name+"-0", metav1.GetOptions{})
		require.NoError(t, err)
		echo(t, net.JoinHostPort(pod.Status.PodIP, "7"), "hello "+name+"\n")
	}
	waitConsole(t, ns, vm, testguest.RecordPrefix+fmt.Sprint(next+2), time.Minute)

	// Stopped: VolumeSnapshots again; --keep 1 deletes c1's, and with
	// them the driver's snapshots.
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
	c1 := snapshotHandle(t, ns, vmsnapshot.ClaimName(vm, "c1", "system-disk"))
	out = kubectl(t, "", "vm", "snapshot", "-n", ns, vm, "--name", "c2", "--keep", "1")
	require.Regexp(t, `^snapshot c2 of vm csisnaps/cs taken in [0-9.]+s: 4 disks, 2352 MiB; stopped\nsnapshot c1 of vm csisnaps/cs deleted \(--keep 1\)\n$`, out)
	requireVolumeSnapshotGone(t, ns, vmsnapshot.ClaimName(vm, "c1", "system-disk"))
	eventually.Within(t, time.Minute, func() string {
		if _, err := drv.SnapshotPath(c1); err == nil {
			return "the driver still has snapshot " + c1
		}
		return ""
	})
	deleteVM(t, ns, vm)
	deleted = true
	kubectl(t, "", "vm", "snapshot", "delete", "-n", ns, vm, "c2")
	requireVolumeSnapshotGone(t, ns, vmsnapshot.ClaimName(vm, "c2", "records-disk"))
}

// csiDisk is a disk of the VM on a claim of the CSI driver's class.
func csiDisk(name, mode string) string {
	return diskClaim(name, csidriver.StorageClass, mode, "", "128Mi")
}

// Bulk data: bulkMiB of random bytes from bulkOffset, past the records.
const bulkMiB, bulkOffset = 600, 1 << 30

// fillBulk writes the bulk data to claim's volume of the driver and
// returns its sum.
func fillBulk(t *testing.T, drv *csidriver.Driver, ns, claim string) string {
	t.Helper()
	c, err := node.Client.CoreV1().PersistentVolumeClaims(ns).Get(t.Context(), claim, metav1.GetOptions{})
	require.NoError(t, err)
	pv, err := node.Client.CoreV1().PersistentVolumes().Get(t.Context(), c.Spec.VolumeName, metav1.GetOptions{})
	require.NoError(t, err)
	path, err := drv.VolumePath(pv.Spec.CSI.VolumeHandle)
	require.NoError(t, err)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 4<<20)
	for i := range bulkMiB / 4 {
		_, _ = rand.Read(buf)
		_, err := f.WriteAt(buf, bulkOffset+int64(i)*int64(len(buf)))
		require.NoError(t, err)
	}
	require.NoError(t, f.Sync())
	return bulkSum(t, path)
}

// bulkSum is the sum of the bulk data in the disk at path.
func bulkSum(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, io.NewSectionReader(f, bulkOffset, bulkMiB<<20))
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// snapshotHandle is the driver's ID of VolumeSnapshot name's snapshot.
func snapshotHandle(t *testing.T, ns, name string) string {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(node.Config)
	vs, err := dyn.Resource(csidriver.VolumeSnapshots).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	require.NotEmpty(t, content, "VolumeSnapshot %s is bound to no content", name)
	vsc, err := dyn.Resource(csidriver.VolumeSnapshotContents).Get(t.Context(), content, metav1.GetOptions{})
	require.NoError(t, err)
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	require.NotEmpty(t, handle, "VolumeSnapshotContent %s has no handle", content)
	return handle
}

// snapshotData is the file of the driver's snapshot behind VolumeSnapshot
// name of a records disk: the device's bytes, or a Filesystem volume's
// image file.
func snapshotData(t *testing.T, drv *csidriver.Driver, ns, name string) string {
	t.Helper()
	path, err := drv.SnapshotPath(snapshotHandle(t, ns, name))
	require.NoError(t, err)
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return filepath.Join(path, vmpod.DiskFileName)
	}
	return path
}

func requireVolumeSnapshotGone(t *testing.T, ns, name string) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(node.Config)
	eventually.Within(t, time.Minute, func() string {
		_, err := dyn.Resource(csidriver.VolumeSnapshots).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return ""
		}
		return fmt.Sprintf("VolumeSnapshot %s is still there (%v)", name, err)
	})
}
