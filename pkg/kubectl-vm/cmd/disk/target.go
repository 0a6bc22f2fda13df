package disk

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
)

// diskSuffix ends the volume name of a named disk (see v1.VMSpec.DiskName).
const diskSuffix = "-disk"

// target is the disk to fill and what the uploader pod needs of its VM.
type target struct {
	vm  *vmclient.VM
	sts *appsv1.StatefulSet
	// disk is the disk's volume name (root-disk), claim its claim's name.
	disk, claim string
	// claimSize is the size of a Filesystem claim, whose disk is an image
	// file; 0 for a Block claim.
	claimSize int64
}

// findTarget finds the disk of --disk in the VM and checks that the VM
// is stopped.
func (o *Options) findTarget(ctx context.Context, vm *vmclient.VM) (*target, error) {
	sts := vm.StatefulSet
	if sts == nil {
		return nil, fmt.Errorf("vm %s/%s has no StatefulSet yet: the operator has not rendered it; try again in a moment", vm.Namespace, vm.Name)
	}
	t, err := resolveDisk(sts, o.Disk)
	if err != nil {
		return nil, err
	}
	t.vm = vm
	if err := o.stopped(ctx, vm); err != nil {
		return nil, err
	}
	return t, nil
}

// resolveDisk finds disk, a disk's name in the VM or its volume's name,
// among the StatefulSet's claim templates.
func resolveDisk(sts *appsv1.StatefulSet, disk string) (*target, error) {
	all := helperpod.Disks(sts)
	for _, name := range all {
		if name != disk && name != disk+diskSuffix {
			continue
		}
		return &target{sts: sts, disk: name, claim: helperpod.ClaimName(sts, name), claimSize: render.FileDiskSize(helperpod.Template(sts, name).Spec)}, nil
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("--disk %q: vm %s/%s has no disk with a claim", disk, sts.Namespace, sts.Name)
	}
	return nil, fmt.Errorf("--disk %q: vm %s/%s has no such disk; its disks: %s", disk, sts.Namespace, sts.Name, strings.Join(all, ", "))
}

// stopped checks that the VM neither runs nor is meant to: the runner
// must not use the disk while it is written, nor start on a half-written
// one.
func (o *Options) stopped(ctx context.Context, vm *vmclient.VM) error {
	pod, err := o.client.Pod(ctx, vm)
	if err != nil {
		return err
	}
	if pod != nil {
		return fmt.Errorf("vm %s/%s is running (its pod %s exists): stop it first (kubectl vm stop %s --wait)", vm.Namespace, vm.Name, pod.Name, vm.Name)
	}
	if ptr.Deref(vm.StatefulSet.Spec.Replicas, 1) > 0 {
		return fmt.Errorf("vm %s/%s is starting (its StatefulSet wants a pod): stop it first (kubectl vm stop %s --wait)", vm.Namespace, vm.Name, vm.Name)
	}
	return nil
}

// ensureClaim makes the claim of template name unless it exists.
func (o *Options) ensureClaim(ctx context.Context, sts *appsv1.StatefulSet, name string) error {
	claims := o.client.Kube.CoreV1().PersistentVolumeClaims(sts.Namespace)
	existing, err := claims.Get(ctx, helperpod.ClaimName(sts, name), metav1.GetOptions{})
	switch {
	case err == nil:
		if existing.DeletionTimestamp != nil {
			return fmt.Errorf("persistentvolumeclaim %s/%s is being deleted", existing.Namespace, existing.Name)
		}
		return nil
	case !apierrors.IsNotFound(err):
		return o.client.Explain(err)
	}
	claim := helperpod.NewClaim(sts, name)
	_, err = claims.Create(ctx, claim, metav1.CreateOptions{FieldManager: vmclient.FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return o.client.Explain(err)
	}
	if err == nil {
		fmt.Fprintf(o.ErrOut, "persistentvolumeclaim/%s created\n", claim.Name)
	}
	return nil
}
