package vmsnapshot

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
)

// Clone makes the claims of a new VM called name from snap, filled with
// the snapshot's disks and runner data but the machine's uuid, and
// returns the new VM's manifest: the snapshot's VirtualMachine renamed,
// without what makes a machine itself (its SMBIOS uuid, cloud-init's
// instance-id and a hostname that was the original's; new MAC addresses
// where it set them), so that the clone boots beside the original as a machine
// of its own and cloud-init runs in it again. The caller applies it (or
// prints it, in GitOps mode). A clone that fails leaves no claim.
func Clone(ctx context.Context, o Options, snap *Snapshot, name string) (*unstructured.Unstructured, error) {
	ns := snap.Secret.Namespace
	if snap.Info.Phase != PhaseReady {
		return nil, fmt.Errorf("snapshot %s of vm %s/%s is %s, not %s: it cannot be cloned", snap.Info.Name, ns, snap.Info.VM, snap.Info.Phase, PhaseReady)
	}
	vm, err := cloneManifest(snap, name)
	if err != nil {
		return nil, err
	}
	var sts appsv1.StatefulSet
	if err := yaml.Unmarshal(snap.Secret.Data[KeyStatefulSet], &sts); err != nil {
		return nil, fmt.Errorf("snapshot %s of vm %s/%s: its %s: %w", snap.Info.Name, ns, snap.Info.VM, KeyStatefulSet, err)
	}
	sts.Name, sts.Namespace = name, ns
	sts.Spec.Selector = &metav1.LabelSelector{MatchLabels: render.SelectorLabels(name)}
	target := &vmclient.VM{Namespace: ns, Name: name, StatefulSet: &sts}

	claims := o.Client.Kube.CoreV1().PersistentVolumeClaims(ns)
	var made []string
	undo := func(err error) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, c := range made {
			if derr := claims.Delete(ctx, c, metav1.DeleteOptions{}); derr != nil {
				err = errors.Join(err, fmt.Errorf("deleting claim %s: %w; delete it yourself", c, o.Client.Explain(derr)))
			}
		}
		return fmt.Errorf("cloning snapshot %s of vm %s/%s as %s: %w", snap.Info.Name, ns, snap.Info.VM, name, err)
	}
	for _, c := range cloneClaims(ctx, o.Client, snap, &sts) {
		if _, err := claims.Create(ctx, c, metav1.CreateOptions{FieldManager: vmclient.FieldManager}); err != nil {
			return nil, undo(o.Client.Explain(err))
		}
		made = append(made, c.Name)
	}
	if err := o.restore(ctx, target, snap, true); err != nil {
		return nil, undo(err)
	}
	return vm, nil
}

// cloneClaims are the new VM's claims as its StatefulSet would make them,
// each disk's of the class, mode and size of the snapshot's copy and
// without a selector (the original's picked the original's volume), or
// made from the disk's VolumeSnapshot.
func cloneClaims(ctx context.Context, c *vmclient.Client, snap *Snapshot, sts *appsv1.StatefulSet) []*corev1.PersistentVolumeClaim {
	claims := []*corev1.PersistentVolumeClaim{helperpod.NewClaim(sts, render.VolumeRunnerData)}
	for _, d := range snap.Info.Disks {
		if d.VolumeSnapshot != "" {
			claims = append(claims, diskClaim(sts, d))
			continue
		}
		claim := helperpod.NewClaim(sts, d.Name)
		if from, err := c.Kube.CoreV1().PersistentVolumeClaims(sts.Namespace).Get(ctx, d.Claim, metav1.GetOptions{}); err == nil {
			claim.Spec = copyClaim(from, claim.Name, snap.Secret).Spec
		} else {
			claim.Spec.Selector = nil
		}
		claims = append(claims, claim)
	}
	return claims
}

// cloneManifest is the snapshot's VirtualMachine as a new machine called
// name.
func cloneManifest(snap *Snapshot, name string) (*unstructured.Unstructured, error) {
	var obj map[string]any
	if err := yaml.Unmarshal(snap.Secret.Data[KeyManifest], &obj); err != nil {
		return nil, fmt.Errorf("snapshot %s: its manifest: %w", snap.Info.Name, err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if !v1.IsVirtualMachine(u.GetAPIVersion(), u.GetKind()) {
		return nil, fmt.Errorf("snapshot %s of vm %s/%s was taken in GitOps mode (it holds the VM's %s, not its VirtualMachine): commit a copy of the VM named %s to Git, then kubectl vm restore %s %s --from %s", snap.Info.Name, snap.Secret.Namespace, snap.Info.VM, u.GetKind(), name, name, snap.Info.Name, snap.Info.VM)
	}
	u.SetName(name)
	u.SetNamespace(snap.Secret.Namespace)
	unstructured.RemoveNestedField(u.Object, "spec", "vm", "machineUuid")
	if nets, ok, _ := unstructured.NestedSlice(u.Object, "spec", "vm", "networks"); ok {
		for _, n := range nets {
			for _, kind := range []string{"tap", "user", "pod"} {
				m, ok := n.(map[string]any)
				if !ok {
					continue
				}
				if _, had, _ := unstructured.NestedString(m, kind, "mac"); had {
					_ = unstructured.SetNestedField(m, newMAC(), kind, "mac")
				}
			}
		}
		_ = unstructured.SetNestedSlice(u.Object, nets, "spec", "vm", "networks")
	}
	unstructured.RemoveNestedField(u.Object, "spec", "cloudInit", "metaData", "instance-id")
	if host, _, _ := unstructured.NestedString(u.Object, "spec", "cloudInit", "metaData", "local-hostname"); host == snap.Info.VM {
		unstructured.RemoveNestedField(u.Object, "spec", "cloudInit", "metaData", "local-hostname")
	}
	return u, nil
}

// newMAC is a random unicast, locally administered MAC address: a NIC of
// the clone's own where the original's had one set (on a bridge both
// share, the original's would clash).
func newMAC() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	b[0] = b[0]&^0x01 | 0x02
	return net.HardwareAddr(b).String()
}
