package vmsnapshot

import (
	"io"
	"testing"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
)

func snapshotClass(t *testing.T, name, driver string, dflt bool) runtime.Object {
	vsc := &snapshotv1.VolumeSnapshotClass{
		TypeMeta:       metav1.TypeMeta{APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshotClass"},
		ObjectMeta:     metav1.ObjectMeta{Name: name},
		Driver:         driver,
		DeletionPolicy: snapshotv1.VolumeSnapshotContentDelete,
	}
	if dflt {
		vsc.Annotations = map[string]string{defaultClassAnnotation: "true"}
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vsc)
	require.NoError(t, err)
	return &unstructured.Unstructured{Object: obj}
}

func claimOf(name, class string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vms"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: ptr.To(class)}}
}

// TestSnapshotClasses: every disk's driver needs a VolumeSnapshotClass
// (its default, or its only one) for a CSI snapshot; else the disks are
// copied, and the reason names the claim and class.
func TestSnapshotClasses(t *testing.T) {
	kube := fake.NewClientset(
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "ceph"}, Provisioner: "rbd.csi.ceph.com"},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "ebs.csi.aws.com"},
		&storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner"},
	)
	kinds := map[schema.GroupVersionResource]string{volumeSnapshotClasses: "VolumeSnapshotClassList"}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), kinds,
		snapshotClass(t, "ceph-a", "rbd.csi.ceph.com", false),
		snapshotClass(t, "ceph-b", "rbd.csi.ceph.com", true),
		snapshotClass(t, "ebs", "ebs.csi.aws.com", false),
	)
	c := &vmclient.Client{Kube: kube, Dynamic: dyn, Namespace: "vms"}
	got, why := snapshotClasses(t.Context(), c, []*corev1.PersistentVolumeClaim{claimOf("root-disk-web-0", "ceph"), claimOf("data-web-0", "fast")})
	require.Empty(t, why)
	require.Equal(t, []string{"ceph-b", "ebs"}, got)

	got, why = snapshotClasses(t.Context(), c, []*corev1.PersistentVolumeClaim{claimOf("root-disk-web-0", "ceph"), claimOf("data-web-0", "local")})
	require.Nil(t, got)
	require.Equal(t, "storage class local (kubernetes.io/no-provisioner) of claim data-web-0 has no VolumeSnapshotClass", why)

	_, why = snapshotClasses(t.Context(), c, []*corev1.PersistentVolumeClaim{claimOf("root-disk-web-0", "gone")})
	require.Contains(t, why, "storage class gone of claim root-disk-web-0")
}

func TestClassFor(t *testing.T) {
	class := func(name, driver string, dflt bool) snapshotv1.VolumeSnapshotClass {
		c := snapshotv1.VolumeSnapshotClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Driver: driver}
		if dflt {
			c.Annotations = map[string]string{defaultClassAnnotation: "true"}
		}
		return c
	}
	classes := []snapshotv1.VolumeSnapshotClass{class("a1", "a", false), class("a2", "a", false), class("b1", "b", false), class("c1", "c", false), class("c2", "c", true)}
	require.Empty(t, classFor(classes, "a"), "two classes, no default: none picked")
	require.Equal(t, "b1", classFor(classes, "b"))
	require.Equal(t, "c2", classFor(classes, "c"))
	require.Empty(t, classFor(classes, "d"))
}

// TestDiskClaim: a disk's claim made from its VolumeSnapshot is the
// StatefulSet's claim, of the snapshot's class, mode and access, with
// room for the whole snapshot and no selector or volume of the old one.
func TestDiskClaim(t *testing.T) {
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "vms"},
		Spec: appsv1.StatefulSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "web"}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "root-disk"},
				Spec: corev1.PersistentVolumeClaimSpec{
					Selector:  &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "web"}},
					Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
				},
			}},
		},
	}
	d := Disk{Name: "root-disk", VolumeSnapshot: "web-snapshot-s1-root-disk", Size: 2 << 30, Block: true, StorageClass: "ceph", AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}}
	c := diskClaim(sts, d)
	require.Equal(t, "root-disk-web-0", c.Name)
	require.Equal(t, "web", c.Labels["app.kubernetes.io/instance"])
	require.Equal(t, &corev1.TypedLocalObjectReference{APIGroup: ptr.To("snapshot.storage.k8s.io"), Kind: "VolumeSnapshot", Name: "web-snapshot-s1-root-disk"}, c.Spec.DataSource)
	require.Nil(t, c.Spec.Selector)
	require.Equal(t, "ceph", *c.Spec.StorageClassName)
	require.Equal(t, corev1.PersistentVolumeBlock, *c.Spec.VolumeMode)
	require.Equal(t, "2Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String())
}

// TestClaimsFromSnapshot: the VM's claims are replaced by ones made from
// the VolumeSnapshots, one made from the same before too (a second
// restore of a snapshot); a missing one is made.
func TestClaimsFromSnapshot(t *testing.T) {
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "vms"},
		Spec: appsv1.StatefulSetSpec{
			Selector:             &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "web"}},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "root-disk"}}, {ObjectMeta: metav1.ObjectMeta{Name: "data"}}, {ObjectMeta: metav1.ObjectMeta{Name: "swap"}}},
		},
	}
	old := claimOf("root-disk-web-0", "ceph")
	old.UID = "old"
	again := diskClaim(sts, Disk{Name: "data", VolumeSnapshot: "web-snapshot-s1-data", StorageClass: "ceph"})
	again.UID = "again"
	kube := fake.NewClientset(old, again)
	o := Options{Client: &vmclient.Client{Kube: kube, Namespace: "vms"}, Timeout: 5 * time.Second, Log: io.Discard}
	snap := &Snapshot{Info: Info{Kind: KindCSI, Disks: []Disk{
		{Name: "root-disk", VolumeSnapshot: "web-snapshot-s1-root-disk", StorageClass: "ceph"},
		{Name: "data", VolumeSnapshot: "web-snapshot-s1-data", StorageClass: "ceph"},
		{Name: "swap", VolumeSnapshot: "web-snapshot-s1-swap", StorageClass: "ceph"},
	}}}
	require.NoError(t, o.claimsFromSnapshot(t.Context(), &vmclient.VM{Namespace: "vms", Name: "web", StatefulSet: sts}, snap))
	for _, d := range snap.Info.Disks {
		c, err := kube.CoreV1().PersistentVolumeClaims("vms").Get(t.Context(), d.Name+"-web-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.Empty(t, c.UID, "claim %s is made anew", c.Name)
		require.Equal(t, d.VolumeSnapshot, c.Spec.DataSource.Name)
	}
}
