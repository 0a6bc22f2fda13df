// Package clone is "kubectl vm clone": a new VM from a snapshot of
// another (pkg/kubectl-vm/vmsnapshot).
package clone

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmsnapshot"
)

// Options are the options of clone.
type Options struct {
	Source, Name, Snapshot string
	// Output "yaml" prints the new VM instead of creating it.
	Output  string
	Timeout time.Duration

	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the clone command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "clone SOURCE NEW [--snapshot NAME] [-o yaml]",
		Short: "Make a new VM from a snapshot of another",
		Long: `Make the VM NEW from snapshot NAME of VM SOURCE (kubectl vm snapshot), or
from a snapshot taken now and deleted after: NEW's claims get the
snapshot's disks and runner data (UEFI variables, TPM state), and NEW is
SOURCE's manifest renamed, without what makes a machine itself: its SMBIOS
uuid (NEW gets its own), its NICs' MAC addresses, cloud-init's instance-id
(so that cloud-init runs again in the clone) and a hostname that was
SOURCE's. The clone starts as SOURCE was (spec.vm.state), beside it.

A snapshot of a deleted VM can be cloned. With -o yaml the new
VirtualMachine is printed rather than created (commit it to Git; its
claims are made all the same). A snapshot taken in GitOps mode holds no
VirtualMachine: clone the VM in Git, then kubectl vm restore the snapshot
into the clone. A clone that fails leaves no claim.

Needs the rights of kubectl vm snapshot and restore, and to create
virtualmachines.`,
		Example: fmt.Sprintf(`  # Ten desktops from a golden image
  %[1]s snapshot golden --name v1
  for i in $(seq 1 10); do %[1]s clone golden desk-$i --snapshot v1; done`, name),
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completion.VMName(configFlags),
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
	f := cmd.Flags()
	f.StringVar(&o.Snapshot, "snapshot", "", "the snapshot of SOURCE to clone (default: one taken now)")
	f.StringVarP(&o.Output, "output", "o", "", "yaml: print the new VirtualMachine instead of creating it")
	f.DurationVar(&o.Timeout, "timeout", 5*time.Minute, "how long to wait for the snapshot pod to run")
	_ = cmd.RegisterFlagCompletionFunc("snapshot", func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completion.VMAndSnapshots(configFlags, "")(cmd, args[:1], toComplete)
	})
	return cmd
}

// Complete takes the names and makes the client.
func (o *Options) Complete(args []string) error {
	o.Source, o.Name = args[0], args[1]
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the flags, all at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Snapshot != "" {
		if err := vmsnapshot.ValidName(o.Snapshot); err != nil {
			errs = append(errs, fmt.Errorf("--snapshot: %w", err))
		}
	}
	if o.Output != "" && o.Output != "yaml" {
		errs = append(errs, fmt.Errorf("--output %q: only yaml", o.Output))
	}
	if o.Source == o.Name {
		errs = append(errs, fmt.Errorf("the clone needs a name of its own, not %q", o.Name))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be more than 0", o.Timeout))
	}
	return errors.Join(errs...)
}

// Run clones the snapshot, taking one first without --snapshot.
func (o *Options) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := o.client
	if err := o.free(ctx); err != nil {
		return err
	}
	opts := vmsnapshot.Options{Client: c, Timeout: o.Timeout, Log: o.ErrOut}
	var snap *vmsnapshot.Snapshot
	var err error
	if o.Snapshot != "" {
		snap, err = vmsnapshot.Get(ctx, c, c.Namespace, o.Source, o.Snapshot)
	} else {
		var src *vmclient.VM
		if src, err = c.Get(ctx, o.Source); err != nil {
			return err
		}
		snap, err = vmsnapshot.Take(ctx, opts, src, "clone-"+vmsnapshot.NewName(time.Now()))
		if err == nil {
			defer func() {
				if derr := vmsnapshot.Delete(context.WithoutCancel(ctx), c, snap.Secret); derr != nil {
					fmt.Fprintf(o.ErrOut, "warning: deleting snapshot %s: %v\n", snap.Info.Name, derr)
				}
			}()
		}
	}
	if err != nil {
		return err
	}
	vm, err := vmsnapshot.Clone(ctx, opts, snap, o.Name)
	if err != nil {
		return err
	}
	if o.Output == "yaml" {
		b, err := yaml.Marshal(vm.Object)
		if err != nil {
			return err
		}
		_, err = o.Out.Write(b)
		return err
	}
	if _, err := c.VMs(c.Namespace).Create(ctx, vm, metav1.CreateOptions{FieldManager: vmclient.FieldManager}); err != nil {
		return fmt.Errorf("creating vm %s/%s (its claims are filled: kubectl vm clone -o yaml prints it): %w", c.Namespace, o.Name, c.Explain(err))
	}
	fmt.Fprintf(o.Out, "vm %s/%s cloned from snapshot %s of %s\n", c.Namespace, o.Name, snap.Info.Name, o.Source)
	return nil
}

// free checks that no VM called Name exists, in either mode: no
// VirtualMachine, and no StatefulSet, which the clone's would be.
func (o *Options) free(ctx context.Context) error {
	c := o.client
	_, err := c.VMs(c.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	if err == nil {
		return fmt.Errorf("vm %s/%s exists: a clone needs a new name", c.Namespace, o.Name)
	}
	// Not found also when the cluster has no CRD (GitOps mode).
	if !apierrors.IsNotFound(err) {
		return c.Explain(err)
	}
	_, err = c.Kube.AppsV1().StatefulSets(c.Namespace).Get(ctx, o.Name, metav1.GetOptions{})
	switch {
	case err == nil:
		return fmt.Errorf("vm %s/%s exists: a clone needs a new name", c.Namespace, o.Name)
	case apierrors.IsNotFound(err):
		return nil
	}
	return c.Explain(err)
}
