package csidriver

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testnode"
)

const ns = "default"

// where the test writes on a Block volume.
const offset = 1 << 20

// TestDriver runs the driver on a node with upstream's sidecars: a pod
// writes to a Block and a Filesystem claim of the driver's class,
// VolumeSnapshots of both become ready through the real snapshot-controller
// and csi-snapshotter, the pod overwrites what it wrote, and claims from
// the snapshots, provisioned by the real csi-provisioner, hold what was
// there when the snapshots were taken, in another pod; a clone holds what
// is there now. Deleting the snapshots and claims deletes the driver's
// copies, and Stop takes down a pod still using a volume and leaves no
// mount or loop device.
func TestDriver(t *testing.T) {
	prereq.Root(t, "a real node")
	prereq.Installed(t, "root, containerd, runc, iptables, the CNI plugins and a control plane", testnode.Check)
	ctx := t.Context()
	begin := time.Now()
	n, err := testnode.Start(ctx, testnode.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, n.Stop()) })
	t.Logf("node started in %v", time.Since(begin).Round(time.Millisecond))
	begin = time.Now()
	d, err := Start(ctx, n)
	require.NoError(t, err)
	t.Logf("driver started in %v", time.Since(begin).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(d.Log)
			t.Logf("--- driver log %s:\n%s", d.Log, b)
			for _, p := range append(d.sidecars(), n.Kubelet) {
				t.Logf("--- %s log %s, last lines:\n%s", p.Name, p.Log, p.LogTail(40))
			}
		}
		require.NoError(t, d.Stop())
	})
	dc, err := dynamic.NewForConfig(n.Config)
	require.NoError(t, err)

	// The writer's claims and what it writes.
	createClaim(t, n, "disk", corev1.PersistentVolumeBlock, "64Mi", nil)
	createClaim(t, n, "data", corev1.PersistentVolumeFilesystem, "16Mi", nil)
	writer := runPod(t, n, "writer", "disk", "data")
	writerMounts := csiMounts(t, n)
	require.NotEmpty(t, writerMounts)
	before, after := random(t), random(t)
	diskDev := filepath.Join(writer, "dev/disk")
	// Unsynced: the snapshot syncs what the pod wrote to its device.
	writeAt(t, diskDev, before, false)
	require.NoError(t, os.MkdirAll(filepath.Join(writer, "data/dir"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(writer, "data/dir/file"), before, 0o644))
	// The pod's device is the volume's loop device, which the driver
	// bind-mounted where the kubelet asked.
	diskPV := boundVolume(t, n, "disk")
	file, err := d.VolumePath(diskPV.Spec.CSI.VolumeHandle)
	require.NoError(t, err)
	devs, err := loopsOf(file)
	require.NoError(t, err)
	require.Len(t, devs, 1)
	require.Equal(t, rdev(t, devs[0]), rdev(t, diskDev), "the pod's /dev/disk and %s", devs[0])

	begin = time.Now()
	for _, claim := range []string{"disk", "data"} {
		createSnapshot(t, dc, claim+"-snap", claim)
	}
	handles := map[string]string{}
	for _, claim := range []string{"disk", "data"} {
		handles[claim] = readySnapshot(t, dc, claim+"-snap", map[string]string{"disk": "64Mi", "data": "16Mi"}[claim])
	}
	t.Logf("snapshots ready %v after create", time.Since(begin).Round(time.Millisecond))
	snap, err := d.SnapshotPath(handles["disk"])
	require.NoError(t, err)
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(snap, &st))
	require.EqualValues(t, 64<<20, st.Size)
	require.Less(t, st.Blocks*512, int64(1<<20), "the Block snapshot is sparse: %d bytes allocated", st.Blocks*512)

	writeAt(t, diskDev, after, true)
	require.NoError(t, os.WriteFile(filepath.Join(writer, "data/dir/file"), after, 0o644))

	begin = time.Now()
	fromSnap := func(name string) *corev1.TypedLocalObjectReference {
		return &corev1.TypedLocalObjectReference{APIGroup: ptr.To(SnapshotGroup), Kind: "VolumeSnapshot", Name: name}
	}
	createClaim(t, n, "disk-restored", corev1.PersistentVolumeBlock, "64Mi", fromSnap("disk-snap"))
	createClaim(t, n, "data-restored", corev1.PersistentVolumeFilesystem, "32Mi", fromSnap("data-snap"))
	createClaim(t, n, "disk-clone", corev1.PersistentVolumeBlock, "64Mi", &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "disk"})
	restoredPVs := map[string]*corev1.PersistentVolume{}
	for _, c := range []string{"disk-restored", "data-restored", "disk-clone"} {
		restoredPVs[c] = boundVolume(t, n, c)
	}
	t.Logf("restored claims Bound %v after create", time.Since(begin).Round(time.Millisecond))
	capacity := restoredPVs["data-restored"].Spec.Capacity[corev1.ResourceStorage]
	require.EqualValues(t, 32<<20, capacity.Value(), "a restore larger than its snapshot")

	reader := runPod(t, n, "reader", "disk-restored", "data-restored")
	require.Equal(t, before, readAt(t, filepath.Join(reader, "dev/disk")), "the Block restore")
	got, err := os.ReadFile(filepath.Join(reader, "data/dir/file"))
	require.NoError(t, err)
	require.Equal(t, before, got, "the Filesystem restore")
	clone, err := d.VolumePath(restoredPVs["disk-clone"].Spec.CSI.VolumeHandle)
	require.NoError(t, err)
	require.Equal(t, after, readAt(t, clone), "the clone")

	// Deletions reach the driver: snapshots, then claims, their volumes.
	deletePod(t, n, "reader")
	for _, s := range []string{"disk-snap", "data-snap"} {
		require.NoError(t, dc.Resource(VolumeSnapshots).Namespace(ns).Delete(ctx, s, metav1.DeleteOptions{}))
	}
	eventually.Succeeds(t, time.Minute, func() error {
		contents, err := dc.Resource(VolumeSnapshotContents).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		ids, err := d.Snapshots()
		if err != nil {
			return err
		}
		if len(contents.Items) > 0 || len(ids) > 0 {
			return fmt.Errorf("%d VolumeSnapshotContents and the driver's snapshots %v left", len(contents.Items), ids)
		}
		return nil
	})
	for _, c := range []string{"disk-restored", "data-restored", "disk-clone"} {
		require.NoError(t, n.Client.CoreV1().PersistentVolumeClaims(ns).Delete(ctx, c, metav1.DeleteOptions{}))
	}
	want := []string{diskPV.Spec.CSI.VolumeHandle, boundVolume(t, n, "data").Spec.CSI.VolumeHandle}
	slices.Sort(want)
	eventually.Succeeds(t, time.Minute, func() error {
		for _, pv := range restoredPVs {
			if _, err := n.Client.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return fmt.Errorf("PersistentVolume %s of claim %s: %v", pv.Name, pv.Spec.ClaimRef.Name, err)
			}
		}
		ids, err := d.Volumes()
		if err != nil {
			return err
		}
		if !slices.Equal(ids, want) {
			return fmt.Errorf("the driver's volumes %v, want %v", ids, want)
		}
		return nil
	})
	require.Equal(t, writerMounts, csiMounts(t, n), "the writer's mounts alone")
	loops, err := loopsBelow(d.Dir)
	require.NoError(t, err)
	require.Len(t, loops, 1, "the loop device of the writer's disk alone: %v", loops)

	// Stop with the writer still running.
	require.NoError(t, d.Stop())
	_, err = n.Client.CoreV1().Pods(ns).Get(ctx, "writer", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the writer after Stop: %v", err)
	require.Empty(t, csiMounts(t, n), "publishes after Stop")
	loops, err = loopsBelow(d.Dir)
	require.NoError(t, err)
	require.Empty(t, loops, "loop devices after Stop")
	require.NoDirExists(t, d.Dir)
	eventually.Succeeds(t, time.Minute, func() error {
		cn, err := n.Client.StorageV1().CSINodes().Get(ctx, testnode.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, dr := range cn.Spec.Drivers {
			if dr.Name == DriverName {
				return fmt.Errorf("CSINode %s lists %s still", testnode.Name, DriverName)
			}
		}
		return nil
	})
}

func random(t *testing.T) []byte {
	b := make([]byte, 64<<10)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func writeAt(t *testing.T, path string, b []byte, sync bool) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(b, offset)
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

func readAt(t *testing.T, path string) []byte {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 64<<10)
	_, err = f.ReadAt(b, offset)
	require.NoError(t, err)
	return b
}

// rdev is the device number of a device node.
func rdev(t *testing.T, path string) uint64 {
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	require.Equal(t, uint32(syscall.S_IFBLK), st.Mode&syscall.S_IFMT, "%s is no block device", path)
	return st.Rdev
}

func createClaim(t *testing.T, n *testnode.Node, name string, mode corev1.PersistentVolumeMode, size string, source *corev1.TypedLocalObjectReference) {
	_, err := n.Client.CoreV1().PersistentVolumeClaims(ns).Create(t.Context(), &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(StorageClass),
			VolumeMode:       &mode,
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
			DataSource:       source,
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// boundVolume waits until the claim is Bound and returns its volume, one
// of the driver's.
func boundVolume(t *testing.T, n *testnode.Node, claim string) *corev1.PersistentVolume {
	ctx := t.Context()
	var pv *corev1.PersistentVolume
	eventually.Succeeds(t, 2*time.Minute, func() error {
		c, err := n.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c.Status.Phase != corev1.ClaimBound {
			return fmt.Errorf("claim %s is %s", claim, c.Status.Phase)
		}
		pv, err = n.Client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		return err
	})
	require.NotNil(t, pv.Spec.CSI, "volume %s", pv.Name)
	require.Equal(t, DriverName, pv.Spec.CSI.Driver)
	return pv
}

// runPod runs a pod that holds a Block claim at /dev/disk and a
// Filesystem claim at /data, and returns its container's root as the host
// sees it (/proc/PID/root), through which the test reads and writes.
func runPod(t *testing.T, n *testnode.Node, name, disk, data string) string {
	ctx := t.Context()
	claim := func(c string) corev1.VolumeSource {
		return corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c}}
	}
	_, err := n.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "c", Image: testnode.PauseImage, ImagePullPolicy: corev1.PullNever,
				VolumeDevices: []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/disk"}},
				VolumeMounts:  []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{{Name: "disk", VolumeSource: claim(disk)}, {Name: "data", VolumeSource: claim(data)}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	var id string
	eventually.Succeeds(t, 2*time.Minute, func() error {
		p, err := n.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if p.Status.Phase != corev1.PodRunning || len(p.Status.ContainerStatuses) == 0 {
			return fmt.Errorf("pod %s: %+v", name, p.Status)
		}
		id = strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
		return nil
	})
	pid, err := n.Containerd.PID(ctx, id)
	require.NoError(t, err)
	return fmt.Sprintf("/proc/%d/root", pid)
}

func deletePod(t *testing.T, n *testnode.Node, name string) {
	ctx := t.Context()
	pods := n.Client.CoreV1().Pods(ns)
	require.NoError(t, pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}))
	eventually.Succeeds(t, time.Minute, func() error {
		if _, err := pods.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("pod %s still there (%v)", name, err)
		}
		return nil
	})
}

func createSnapshot(t *testing.T, dc dynamic.Interface, name, claim string) {
	// No class: the default one, the driver's.
	_, err := dc.Resource(VolumeSnapshots).Namespace(ns).Create(t.Context(), &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": SnapshotGroup + "/v1",
		"kind":       "VolumeSnapshot",
		"metadata":   map[string]any{"name": name},
		"spec":       map[string]any{"source": map[string]any{"persistentVolumeClaimName": claim}},
	}}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// readySnapshot waits until the VolumeSnapshot is ready to use, checks
// its status and returns the driver's snapshot ID (its content's handle).
func readySnapshot(t *testing.T, dc dynamic.Interface, name, size string) string {
	ctx := t.Context()
	var vs *unstructured.Unstructured
	eventually.Succeeds(t, 2*time.Minute, func() error {
		var err error
		vs, err = dc.Resource(VolumeSnapshots).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if ready, _, _ := unstructured.NestedBool(vs.Object, "status", "readyToUse"); !ready {
			return fmt.Errorf("VolumeSnapshot %s not ready: %v", name, vs.Object["status"])
		}
		return nil
	})
	class, _, _ := unstructured.NestedString(vs.Object, "spec", "volumeSnapshotClassName")
	require.Equal(t, SnapshotClass, class, "the default class")
	restoreSize, _, _ := unstructured.NestedString(vs.Object, "status", "restoreSize")
	want, got := resource.MustParse(size), resource.MustParse(restoreSize)
	require.Equal(t, want.Value(), got.Value(), "restoreSize")
	created, _, _ := unstructured.NestedString(vs.Object, "status", "creationTime")
	require.NotEmpty(t, created)
	content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	vsc, err := dc.Resource(VolumeSnapshotContents).Get(ctx, content, metav1.GetOptions{})
	require.NoError(t, err)
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	require.NotEmpty(t, handle)
	return handle
}

// csiMounts lists the kubelet's mounts of CSI volumes: publishes, and the
// bind mounts of Block volumes' devices it makes of them.
func csiMounts(t *testing.T, n *testnode.Node) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var ms []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], n.KubeletRootDir()+"/") &&
			(strings.Contains(f[4], "/kubernetes.io/csi/") || strings.Contains(f[4], "/kubernetes.io~csi/")) {
			ms = append(ms, f[4])
		}
	}
	return ms
}
