// Package restore is "kubectl vm restore": a VM back to one of its
// snapshots (pkg/kubectl-vm/vmsnapshot).
package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/state"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmsnapshot"
)

// Options are the options of restore.
type Options struct {
	VM, Snapshot string
	// From is the VM whose snapshot it is; VM by default.
	From    string
	Timeout time.Duration

	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the restore command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "restore VM SNAPSHOT [--from SOURCE] [--timeout 10m]",
		Short: "Put a VM back to one of its snapshots",
		Long: `Put the VM back to its snapshot SNAPSHOT (kubectl vm snapshot): its disks
and its runner data (UEFI variables, TPM state, machine uuid) become the
snapshot's. A running VM is stopped first (its guest shuts down as at kubectl
vm stop) and started again after; a stopped VM stays stopped.

The VM's disks as they were are first copied into a snapshot of their own,
` + vmsnapshot.BeforeRestorePrefix + `TIME, which puts them back if the restore fails and is
deleted when it succeeded: the VM never starts on half-restored disks. The
VM's manifest is not changed (kubectl vm snapshot list shows what the
snapshot holds). In GitOps mode the stop and start are scales of the
StatefulSet, as kubectl vm stop and start do.

With --from, SNAPSHOT is one of VM SOURCE's, which must have the same
disks: VM becomes a clone of it (it keeps its own machine uuid), as
kubectl vm clone does for a VM in Git.

Needs the rights of kubectl vm snapshot and stop/start.`,
		Example: fmt.Sprintf(`  # Undo a failed upgrade of the guest
  %[1]s restore web before-upgrade

  # Fill desk-1, committed to Git as a copy of golden, from golden's v1
  %[1]s restore desk-1 v1 --from golden`, name),
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completion.VMAndSnapshots(configFlags, "from"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&o.From, "from", "", "the VM whose snapshot SNAPSHOT is (default: VM)")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 10*time.Minute, "how long each step (the stop, the snapshot pod, the start) may take")
	return cmd
}

// Complete takes the names and makes the client.
func (o *Options) Complete(args []string) error {
	o.VM, o.Snapshot = args[0], args[1]
	if o.From == "" {
		o.From = o.VM
	}
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the arguments.
func (o *Options) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %s: must be more than 0", o.Timeout)
	}
	return vmsnapshot.ValidName(o.Snapshot)
}

// Run stops the VM, restores the snapshot and starts the VM if it ran.
func (o *Options) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := o.client
	vm, err := c.Get(ctx, o.VM)
	if err != nil {
		return err
	}
	snap, err := vmsnapshot.Get(ctx, c, vm.Namespace, o.From, o.Snapshot)
	if err != nil {
		return err
	}
	wasRunning := state.IsRunning(vm)
	if wasRunning {
		if err := state.Set(ctx, c, o.IOStreams, vm.Name, false, o.Timeout); err != nil {
			return fmt.Errorf("stopping vm %s/%s for the restore: %w", vm.Namespace, vm.Name, err)
		}
		if vm, err = c.Get(ctx, o.VM); err != nil {
			return err
		}
	}
	started := time.Now()
	err = vmsnapshot.Restore(ctx, vmsnapshot.Options{Client: c, Timeout: o.Timeout, Log: o.ErrOut}, vm, snap)
	if err == nil {
		fmt.Fprintf(o.Out, "vm %s/%s restored to snapshot %s in %.1fs\n", vm.Namespace, vm.Name, snap.Info.Name, time.Since(started).Seconds())
	}
	if wasRunning {
		// Also after a failed restore: the disks are as they were.
		if serr := state.Set(ctx, c, o.IOStreams, vm.Name, true, o.Timeout); serr != nil {
			err = errors.Join(err, fmt.Errorf("starting vm %s/%s again: %w", vm.Namespace, vm.Name, serr))
		}
	}
	return err
}
