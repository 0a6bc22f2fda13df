package vmsnapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
)

// BeforeRestorePrefix starts the name of the snapshot that keeps a VM's
// disks while a restore writes over them.
const BeforeRestorePrefix = "before-restore-"

// Restore makes the stopped VM's disks and runner data those of snap,
// a snapshot of it or of another VM (then as a clone: the VM keeps its
// machine uuid). The disks as they were are first kept in a snapshot of their own,
// which brings them back when the restore fails, and which is deleted
// once it succeeded: a restore is whole or not at all.
func Restore(ctx context.Context, o Options, vm *vmclient.VM, snap *Snapshot) error {
	sts := vm.StatefulSet
	if sts == nil {
		return fmt.Errorf("vm %s/%s has no StatefulSet yet: the operator has not rendered it; try again in a moment", vm.Namespace, vm.Name)
	}
	if snap.Info.Phase != PhaseReady {
		return fmt.Errorf("snapshot %s of vm %s/%s is %s, not %s: it cannot be restored", snap.Info.Name, vm.Namespace, vm.Name, snap.Info.Phase, PhaseReady)
	}
	disks := helperpod.Disks(sts)
	for _, d := range snap.Info.Disks {
		if !slices.Contains(disks, d.Name) {
			return fmt.Errorf("vm %s/%s has no disk %s, which snapshot %s holds; its disks: %v", vm.Namespace, vm.Name, d.Name, snap.Info.Name, disks)
		}
	}
	fmt.Fprintf(o.Log, "keeping the disks as they are in snapshot %s%s until the restore is done\n", BeforeRestorePrefix, NewName(time.Now()))
	before, err := Take(ctx, o, vm, BeforeRestorePrefix+NewName(time.Now()))
	if err != nil {
		return fmt.Errorf("keeping the disks as they are before the restore: %w", err)
	}
	cleanup := func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		return Delete(ctx, o.Client, before.Secret)
	}
	// A CSI snapshot's disks come back as claims made anew from it.
	restore := func(ctx context.Context, snap *Snapshot, clone bool) error {
		if snap.Info.Kind == KindCSI {
			if err := o.claimsFromSnapshot(ctx, vm, snap); err != nil {
				return err
			}
		}
		return o.restore(ctx, vm, snap, clone)
	}
	if err := restore(ctx, snap, snap.Info.VM != vm.Name); err != nil {
		fmt.Fprintf(o.Log, "the restore failed (%v); bringing the disks back as they were\n", err)
		if rerr := restore(context.WithoutCancel(ctx), before, false); rerr != nil {
			return fmt.Errorf("restoring snapshot %s of vm %s/%s: %w; bringing the disks back failed too (%v): they are in snapshot %s (kubectl vm restore %s %s)",
				snap.Info.Name, vm.Namespace, vm.Name, err, rerr, before.Info.Name, vm.Name, before.Info.Name)
		}
		return errors.Join(fmt.Errorf("restoring snapshot %s of vm %s/%s: %w; the disks are as they were", snap.Info.Name, vm.Namespace, vm.Name, err), cleanup())
	}
	return cleanup()
}

// restore copies snap's disks and runner data onto the VM's claims in
// the snapshot pod (a CSI snapshot's disks are claims made from it: the
// pod holding them shows that they could be); for a clone, all the runner
// data but the machine's uuid.
func (o Options) restore(ctx context.Context, vm *vmclient.VM, snap *Snapshot, clone bool) error {
	sts := vm.StatefulSet
	var vmClaims []string
	for _, d := range snap.Info.Disks {
		vmClaims = append(vmClaims, helperpod.ClaimName(sts, d.Name))
	}
	helper, err := helperpod.New(sts, PodName(vm.Name), Component, podVolumes(snap.Info, vmClaims, helperpod.ClaimName(sts, render.VolumeRunnerData)))
	if err != nil {
		return err
	}
	if err := helperpod.NoOther(ctx, o.Client, helper, "snapshot or restore"); err != nil {
		return err
	}
	return helperpod.Run(ctx, o.Client, helper, "restore", o.Timeout, o.Log, func(helper *corev1.Pod) error {
		for i, d := range snap.Info.Disks {
			if d.Claim == "" {
				// Made from its VolumeSnapshot: the pod holding it
				// shows that the storage could.
				continue
			}
			fmt.Fprintf(o.Log, "restoring disk %s from snapshot %s\n", d.Name, snap.Info.Name)
			if _, err := o.copyDisk(ctx, helper, diskPath(helperVolume(i), d.Block), diskPath(vmVolume(i), d.Block), d.Size); err != nil {
				return fmt.Errorf("disk %s: %w", d.Name, err)
			}
		}
		cmd := []string{"snapshot", "restore-data"}
		if clone {
			cmd = append(cmd, "--clone")
		}
		if _, err := runIn(ctx, o.Client, helper, "the runner data", bytes.NewReader(snap.Secret.Data[KeyRunnerData]), cmd...); err != nil {
			return err
		}
		if clone {
			return o.renewMachineIDs(ctx, helper, snap.Info.Disks)
		}
		return nil
	})
}

// renewMachineIDs gives the Linux guest on a clone's disks a machine id
// of its own, and says where, or that there was none.
func (o Options) renewMachineIDs(ctx context.Context, helper *corev1.Pod, disks []Disk) error {
	renewed := false
	for i, d := range disks {
		out, err := runIn(ctx, o.Client, helper, "disk "+d.Name+"'s machine id", nil, "snapshot", "machine-id", diskPath(vmVolume(i), d.Block))
		if err != nil {
			return err
		}
		for _, file := range strings.FieldsFunc(string(out), func(r rune) bool { return r == '\n' }) {
			fmt.Fprintf(o.Log, "disk %s: a new machine id in %s\n", d.Name, file)
			renewed = true
		}
	}
	if !renewed {
		fmt.Fprintln(o.Log, "no Linux machine id on the disks to renew: the guest keeps the identity its disks hold (docs/user-guide/disks.md, clone)")
	}
	return nil
}
