package vmsnapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	snapshotv1 "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
)

// KindCSI is a snapshot whose disks are CSI VolumeSnapshots, one per disk,
// which the storage cuts; restored and cloned as claims made from them.
const KindCSI = "csi"

// The VolumeSnapshot API (external-snapshotter's CRDs).
var (
	volumeSnapshots       = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshots")
	volumeSnapshotClasses = snapshotv1.SchemeGroupVersion.WithResource("volumesnapshotclasses")
)

// defaultClassAnnotation marks the VolumeSnapshotClass of a driver that
// takes snapshots that name none.
const defaultClassAnnotation = "snapshot.storage.kubernetes.io/is-default-class"

// freezeTimeout bounds the guest's freeze for a CSI snapshot: the runner
// thaws it by then even if this command died.
const freezeTimeout = time.Minute

// snapshotClasses is the VolumeSnapshotClass for each claim, when the CSI
// driver of every claim's storage class has one; else nil and why not,
// and the disks are copied.
func snapshotClasses(ctx context.Context, c *vmclient.Client, claims []*corev1.PersistentVolumeClaim) ([]string, string) {
	list, err := c.Dynamic.Resource(volumeSnapshotClasses).List(ctx, metav1.ListOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, "the cluster has no VolumeSnapshot API"
	case apierrors.IsForbidden(err):
		return nil, "you may not list VolumeSnapshotClasses"
	case err != nil:
		return nil, fmt.Sprintf("listing VolumeSnapshotClasses: %v", c.Explain(err))
	}
	var classes []snapshotv1.VolumeSnapshotClass
	for _, u := range list.Items {
		var vsc snapshotv1.VolumeSnapshotClass
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vsc); err != nil {
			return nil, fmt.Sprintf("VolumeSnapshotClass %s: %v", u.GetName(), err)
		}
		classes = append(classes, vsc)
	}
	var picked []string
	for _, claim := range claims {
		sc := ptr.Deref(claim.Spec.StorageClassName, "")
		if sc == "" {
			return nil, fmt.Sprintf("claim %s names no storage class", claim.Name)
		}
		class, err := c.Kube.StorageV1().StorageClasses().Get(ctx, sc, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Sprintf("storage class %s of claim %s: %v", sc, claim.Name, c.Explain(err))
		}
		vsc := classFor(classes, class.Provisioner)
		if vsc == "" {
			return nil, fmt.Sprintf("storage class %s (%s) of claim %s has no VolumeSnapshotClass", sc, class.Provisioner, claim.Name)
		}
		picked = append(picked, vsc)
	}
	return picked, ""
}

// classFor is driver's VolumeSnapshotClass: its default one, else its
// only one; "" when it has none or several and no default.
func classFor(classes []snapshotv1.VolumeSnapshotClass, driver string) string {
	var of []string
	for _, c := range classes {
		if c.Driver != driver {
			continue
		}
		if c.Annotations[defaultClassAnnotation] == "true" {
			return c.Name
		}
		of = append(of, c.Name)
	}
	if len(of) == 1 {
		return of[0]
	}
	return ""
}

// takeCSI cuts a VolumeSnapshot of each disk, with the guest's file
// systems frozen meanwhile when it runs, archives the runner data (in
// the VM's pod, or when it is stopped in the helper pod), waits until the
// snapshots are ready to use and marks the snapshot Ready.
func (o Options) takeCSI(ctx context.Context, snap *Snapshot, vmPod, helper *corev1.Pod, sources []*corev1.PersistentVolumeClaim, classes []string) error {
	started := time.Now()
	var data []byte
	if vmPod == nil {
		snap.Info.Consistency = Stopped
		if err := o.cutSnapshots(ctx, snap, sources, classes); err != nil {
			return err
		}
		err := helperpod.Run(ctx, o.Client, helper, "snapshot", o.Timeout, o.Log, func(helper *corev1.Pod) error {
			var err error
			data, err = o.archive(ctx, helper)
			return err
		})
		if err != nil {
			return err
		}
	} else {
		frozen, why := o.freeze(ctx, vmPod)
		snap.Info.Consistency, snap.Info.Why = CrashConsistent, why
		if frozen {
			snap.Info.Consistency = Consistent
		}
		err := o.cutSnapshots(ctx, snap, sources, classes)
		if err == nil {
			data, err = o.archive(ctx, vmPod)
		}
		if frozen {
			snap.Info.FrozenSeconds = time.Since(started).Seconds()
			err = errors.Join(err, o.thaw(ctx, vmPod))
		}
		if err != nil {
			return err
		}
	}
	ready := func(vs *snapshotv1.VolumeSnapshotStatus) bool { return ptr.Deref(vs.ReadyToUse, false) }
	if err := o.waitSnapshots(ctx, snap, ready, "ready to use"); err != nil {
		return err
	}
	snap.Info.Seconds = time.Since(started).Seconds()
	return o.markReady(ctx, snap, data)
}

// cutSnapshots creates the disks' VolumeSnapshots and waits until the
// storage has cut each (its creation time set), not until it is ready.
func (o Options) cutSnapshots(ctx context.Context, snap *Snapshot, sources []*corev1.PersistentVolumeClaim, classes []string) error {
	for i, d := range snap.Info.Disks {
		fmt.Fprintf(o.Log, "taking VolumeSnapshot %s of disk %s (class %s)\n", d.VolumeSnapshot, d.Name, classes[i])
		vs := newVolumeSnapshot(snap.Secret, d.VolumeSnapshot, sources[i].Name, classes[i])
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(vs)
		if err != nil {
			return err
		}
		_, err = o.Client.Dynamic.Resource(volumeSnapshots).Namespace(snap.Secret.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: vmclient.FieldManager})
		if err != nil {
			return fmt.Errorf("VolumeSnapshot %s of disk %s: %w", d.VolumeSnapshot, d.Name, o.Client.Explain(err))
		}
	}
	return o.waitSnapshots(ctx, snap, func(vs *snapshotv1.VolumeSnapshotStatus) bool { return vs.CreationTime != nil }, "cut")
}

// newVolumeSnapshot is the VolumeSnapshot name of claim, owned by the
// snapshot's Secret.
func newVolumeSnapshot(owner *corev1.Secret, name, claim, class string) *snapshotv1.VolumeSnapshot {
	return &snapshotv1.VolumeSnapshot{
		TypeMeta: metav1.TypeMeta{APIVersion: snapshotv1.SchemeGroupVersion.String(), Kind: "VolumeSnapshot"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: owner.Namespace,
			Labels:          owner.Labels,
			OwnerReferences: OwnedBy(owner),
		},
		Spec: snapshotv1.VolumeSnapshotSpec{
			Source:                  snapshotv1.VolumeSnapshotSource{PersistentVolumeClaimName: ptr.To(claim)},
			VolumeSnapshotClassName: ptr.To(class),
		},
	}
}

// waitSnapshots waits, within o.Timeout, until done holds for every
// disk's VolumeSnapshot, and records their sizes; a snapshot's error
// ends it.
func (o Options) waitSnapshots(ctx context.Context, snap *Snapshot, done func(*snapshotv1.VolumeSnapshotStatus) bool, what string) error {
	ns := snap.Secret.Namespace
	var waiting string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, o.Timeout, true, func(ctx context.Context) (bool, error) {
		snap.Info.Bytes = 0
		for i := range snap.Info.Disks {
			d := &snap.Info.Disks[i]
			vs, err := getVolumeSnapshot(ctx, o.Client, ns, d.VolumeSnapshot)
			if err != nil {
				return false, fmt.Errorf("VolumeSnapshot %s of disk %s: %w", d.VolumeSnapshot, d.Name, err)
			}
			st := ptr.Deref(vs.Status, snapshotv1.VolumeSnapshotStatus{})
			if st.Error != nil && st.Error.Message != nil {
				return false, fmt.Errorf("VolumeSnapshot %s of disk %s failed: %s", d.VolumeSnapshot, d.Name, *st.Error.Message)
			}
			if !done(&st) {
				waiting = d.VolumeSnapshot
				return false, nil
			}
			if st.RestoreSize != nil {
				d.Size = st.RestoreSize.Value()
			}
			snap.Info.Bytes += d.Size
		}
		return true, nil
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("VolumeSnapshot %s is not %s after %s: kubectl describe volumesnapshot %s -n %s says why", waiting, what, o.Timeout, waiting, ns)
	}
	return err
}

// getVolumeSnapshot reads VolumeSnapshot name.
func getVolumeSnapshot(ctx context.Context, c *vmclient.Client, ns, name string) (*snapshotv1.VolumeSnapshot, error) {
	u, err := c.Dynamic.Resource(volumeSnapshots).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, c.Explain(err)
	}
	var vs snapshotv1.VolumeSnapshot
	return &vs, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &vs)
}

// deleteVolumeSnapshots deletes a failed snapshot's VolumeSnapshots at
// once (the garbage collector would, in its time).
func deleteVolumeSnapshots(ctx context.Context, c *vmclient.Client, snap *Snapshot) error {
	for _, d := range snap.Info.Disks {
		if d.VolumeSnapshot == "" {
			continue
		}
		err := c.Dynamic.Resource(volumeSnapshots).Namespace(snap.Secret.Namespace).Delete(ctx, d.VolumeSnapshot, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting VolumeSnapshot %s of the failed snapshot: %w", d.VolumeSnapshot, c.Explain(err))
		}
	}
	return nil
}

// freeze has the VM's runner freeze the guest's file systems, for at most
// freezeTimeout; false and why when it could not.
func (o Options) freeze(ctx context.Context, vmPod *corev1.Pod) (bool, string) {
	if _, err := runIn(ctx, o.Client, vmPod, "the guest's freeze", nil, "freeze", "--timeout", freezeTimeout.String()); err != nil {
		why := err.Error()
		fmt.Fprintf(o.Log, "%s: the snapshot is crash-consistent\n", why)
		return false, why
	}
	return true, ""
}

// thaw has the VM's runner thaw the guest's file systems.
func (o Options) thaw(ctx context.Context, vmPod *corev1.Pod) error {
	if _, err := runIn(ctx, o.Client, vmPod, "thawing the guest", nil, "thaw"); err != nil {
		return fmt.Errorf("%w; the runner thaws the guest by itself within %s", err, freezeTimeout)
	}
	return nil
}

// archive is the runner data's archive, made in pod (the VM's, or a
// helper holding its runner-data claim).
func (o Options) archive(ctx context.Context, pod *corev1.Pod) ([]byte, error) {
	return runIn(ctx, o.Client, pod, "the runner data's archive", nil, "snapshot", "data")
}

// claimsFromSnapshot makes the VM's disk claims anew from snap's
// VolumeSnapshots, deleting the claims there are (the caller has kept
// them in a snapshot).
func (o Options) claimsFromSnapshot(ctx context.Context, vm *vmclient.VM, snap *Snapshot) error {
	claims := o.Client.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace)
	for _, d := range snap.Info.Disks {
		want := diskClaim(vm.StatefulSet, d)
		old, err := claims.Get(ctx, want.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return o.Client.Explain(err)
		default:
			fmt.Fprintf(o.Log, "replacing claim %s with one made from VolumeSnapshot %s\n", old.Name, d.VolumeSnapshot)
			if err := o.deleteClaim(ctx, old); err != nil {
				return err
			}
		}
		if _, err := claims.Create(ctx, want, metav1.CreateOptions{FieldManager: vmclient.FieldManager}); err != nil {
			return fmt.Errorf("claim %s from VolumeSnapshot %s: %w", want.Name, d.VolumeSnapshot, o.Client.Explain(err))
		}
	}
	return nil
}

// deleteClaim deletes claim and waits, within o.Timeout, until it is gone.
func (o Options) deleteClaim(ctx context.Context, claim *corev1.PersistentVolumeClaim) error {
	claims := o.Client.Kube.CoreV1().PersistentVolumeClaims(claim.Namespace)
	err := claims.Delete(ctx, claim.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(claim.UID)}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting claim %s: %w", claim.Name, o.Client.Explain(err))
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, o.Timeout, true, func(ctx context.Context) (bool, error) {
		got, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || (err == nil && got.UID != claim.UID) {
			return true, nil
		}
		return false, o.Client.Explain(err)
	})
	if wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("claim %s is still there %s after its deletion: a pod still uses it (kubectl describe pvc %s -n %s)", claim.Name, o.Timeout, claim.Name, claim.Namespace)
	}
	return err
}

// fromVolumeSnapshot makes claim's data d's VolumeSnapshot, with room for
// all of it.
func fromVolumeSnapshot(claim *corev1.PersistentVolumeClaim, d Disk) {
	claim.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr.To(snapshotv1.GroupName), Kind: "VolumeSnapshot", Name: d.VolumeSnapshot}
	claim.Spec.DataSourceRef = nil
	claim.Spec.Selector = nil
	claim.Spec.VolumeName = ""
	if d.StorageClass != "" {
		claim.Spec.StorageClassName = ptr.To(d.StorageClass)
	}
	if len(d.AccessModes) > 0 {
		claim.Spec.AccessModes = d.AccessModes
	}
	mode := corev1.PersistentVolumeFilesystem
	if d.Block {
		mode = corev1.PersistentVolumeBlock
	}
	claim.Spec.VolumeMode = ptr.To(mode)
	if size := claim.Spec.Resources.Requests[corev1.ResourceStorage]; size.Value() < d.Size {
		if claim.Spec.Resources.Requests == nil {
			claim.Spec.Resources.Requests = corev1.ResourceList{}
		}
		claim.Spec.Resources.Requests[corev1.ResourceStorage] = *resource.NewQuantity(d.Size, resource.BinarySI)
	}
}

// diskClaim is the claim of the VM's disk d as its StatefulSet makes it,
// made from d's VolumeSnapshot.
func diskClaim(sts *appsv1.StatefulSet, d Disk) *corev1.PersistentVolumeClaim {
	claim := helperpod.NewClaim(sts, d.Name)
	fromVolumeSnapshot(claim, d)
	return claim
}
