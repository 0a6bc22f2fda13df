package vmsnapshot

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/vmpod"
)

func TestValidName(t *testing.T) {
	for _, ok := range []string{"s1", "before-upgrade", NewName(time.Date(2026, 11, 28, 9, 15, 0, 0, time.UTC)), BeforeRestorePrefix + NewName(time.Now())} {
		require.NoError(t, ValidName(ok), ok)
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", "a.b", "0123456789012345678901234567890123456789x"} {
		require.ErrorContains(t, ValidName(bad), "must be 1 to 40 lower-case letters", bad)
	}
	require.Equal(t, "20261128-091500", NewName(time.Date(2026, 11, 28, 9, 15, 0, 0, time.UTC)))
}

// TestCopyClaim: the copy's claim is as large as the volume the VM's
// claim got, of its class and mode, owned by the snapshot, and selects
// no volume (the VM's selector picks the VM's).
func TestCopyClaim(t *testing.T) {
	from := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "root-disk-web-0", Namespace: "vms"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To("local-block"),
			VolumeMode:       ptr.To(corev1.PersistentVolumeBlock),
			Selector:         &metav1.LabelSelector{MatchLabels: map[string]string{"disk": "web"}},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")}},
		},
		Status: corev1.PersistentVolumeClaimStatus{Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("12Gi")}},
	}
	owner, err := NewSecret("vms", Info{VM: "web", Name: "s1", Kind: KindCopy, Phase: PhaseInProgress}, []byte("kind: VirtualMachine\n"))
	require.NoError(t, err)
	owner.UID = "uid-1"
	c := copyClaim(from, ClaimName("web", "s1", "root-disk"), owner)
	require.Equal(t, "web-snapshot-s1-root-disk", c.Name)
	require.Nil(t, c.Spec.Selector)
	require.Equal(t, from.Spec.StorageClassName, c.Spec.StorageClassName)
	require.Equal(t, from.Spec.VolumeMode, c.Spec.VolumeMode)
	require.Equal(t, "12Gi", ptr.To(c.Spec.Resources.Requests[corev1.ResourceStorage]).String())
	require.Equal(t, "uid-1", string(c.OwnerReferences[0].UID))
	require.Equal(t, map[string]string{
		"app.kubernetes.io/instance": "web", "app.kubernetes.io/managed-by": vmpod.ManagedBy, "app.kubernetes.io/component": "snapshot",
		LabelSnapshot: "s1",
	}, c.Labels)
}

// TestListGetDelete: a VM's snapshots, oldest first; others' and
// Secrets of other types are not; a missing one says how to list them.
func TestListGetDelete(t *testing.T) {
	kube := fake.NewClientset()
	c := &vmclient.Client{Kube: kube, Namespace: "vms"}
	ctx := t.Context()
	for i, s := range []struct{ vm, name string }{{"web", "b"}, {"web", "a"}, {"db", "a"}} {
		secret, err := NewSecret("vms", Info{VM: s.vm, Name: s.name, Kind: KindCopy, Phase: PhaseReady}, nil)
		require.NoError(t, err)
		secret.CreationTimestamp = metav1.NewTime(time.Unix(int64(1000+i), 0))
		_, err = kube.CoreV1().Secrets("vms").Create(ctx, secret, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "web-snapshot-x", Namespace: "vms", Labels: Labels("web", "x")}}
	_, err := kube.CoreV1().Secrets("vms").Create(ctx, other, metav1.CreateOptions{})
	require.NoError(t, err)

	snaps, err := List(ctx, c, "vms", "web")
	require.NoError(t, err)
	require.Len(t, snaps, 2)
	require.Equal(t, []string{"b", "a"}, []string{snaps[0].Info.Name, snaps[1].Info.Name})
	all, err := List(ctx, c, "vms", "")
	require.NoError(t, err)
	require.Len(t, all, 3)

	s, err := Get(ctx, c, "vms", "web", "a")
	require.NoError(t, err)
	require.Equal(t, PhaseReady, s.Info.Phase)
	_, err = Get(ctx, c, "vms", "web", "c")
	require.EqualError(t, err, `vm vms/web has no snapshot "c" (kubectl vm snapshot list web)`)
	_, err = Get(ctx, c, "vms", "web", "x")
	require.EqualError(t, err, `secret vms/web-snapshot-x is no snapshot (its type is "")`)

	require.NoError(t, Delete(ctx, c, s.Secret))
	snaps, err = List(ctx, c, "vms", "web")
	require.NoError(t, err)
	require.Len(t, snaps, 1)
}

// TestCloneManifest: the clone is the original renamed, without what
// makes a machine itself; a GitOps snapshot holds no VirtualMachine.
func TestCloneManifest(t *testing.T) {
	secret, err := NewSecret("vms", Info{VM: "golden", Name: "v1", Phase: PhaseReady}, []byte(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: golden
  namespace: vms
  labels:
    team: a
spec:
  cloudInit:
    metaData:
      instance-id: golden-1
      local-hostname: golden
    userData:
      hostname: x
  vm:
    state: Running
    machineUuid: 0b6f4a2e-1111-2222-3333-444455556666
    networks:
    - pod:
        mac: "02:00:00:00:00:01"
        ports: [22]
    - user:
        mac: "02:00:00:00:00:02"
`))
	require.NoError(t, err)
	u, err := cloneManifest(&Snapshot{Secret: secret, Info: Info{VM: "golden", Name: "v1"}}, "desk-1")
	require.NoError(t, err)
	nets, _, _ := unstructured.NestedSlice(u.Object, "spec", "vm", "networks")
	for i, kind := range []string{"pod", "user"} {
		mac, _, _ := unstructured.NestedString(nets[i].(map[string]any), kind, "mac")
		require.Regexp(t, `^[0-9a-f][26ae](:[0-9a-f]{2}){5}$`, mac, "a new unicast, locally administered MAC")
		require.NotContains(t, []string{"02:00:00:00:00:01", "02:00:00:00:00:02"}, mac)
		unstructured.RemoveNestedField(nets[i].(map[string]any), kind, "mac")
	}
	require.NoError(t, unstructured.SetNestedSlice(u.Object, nets, "spec", "vm", "networks"))
	b, err := yaml.Marshal(u.Object)
	require.NoError(t, err)
	require.Equal(t, `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  labels:
    team: a
  name: desk-1
  namespace: vms
spec:
  cloudInit:
    metaData: {}
    userData:
      hostname: x
  vm:
    networks:
    - pod:
        ports:
        - 22
    - user: {}
    state: Running
`, string(b))

	secret.Data[KeyManifest] = []byte("apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: golden\n")
	_, err = cloneManifest(&Snapshot{Secret: secret, Info: Info{VM: "golden", Name: "v1"}}, "desk-1")
	require.EqualError(t, err, "snapshot v1 of vm vms/golden was taken in GitOps mode (it holds the VM's StatefulSet, not its VirtualMachine): commit a copy of the VM named desk-1 to Git, then kubectl vm restore desk-1 v1 --from golden")
}
