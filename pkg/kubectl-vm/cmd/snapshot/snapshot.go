// Package snapshot is "kubectl vm snapshot": take a snapshot of a VM
// (its disks, its manifest and its runner data), list and delete them
// (pkg/kubectl-vm/vmsnapshot holds them).
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmsnapshot"
)

// DefaultTimeout bounds the wait for the snapshot pod to run.
const DefaultTimeout = 5 * time.Minute

// Options are the options of snapshot.
type Options struct {
	VM, Name string
	// Keep is how many snapshots of the VM to keep, the newest; 0 keeps
	// all.
	Keep    int
	Timeout time.Duration

	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the snapshot command, with list and delete.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "snapshot VM [--name NAME] [--keep N]",
		Short: "Take a snapshot of a VM: its disks, manifest, firmware variables and TPM state",
		Long: `Take a snapshot of the VM: a copy of each of its disks in a new claim of
the disk's storage class (any storage: local block volumes and directories
too), its manifest as it is, and its runner data (UEFI variables, TPM
state, machine uuid), so that a restore or a clone boots as it did.

A running VM is snapshotted online: its qemu copies every disk, as it is
at one instant, to a short-lived pod VM-snapshot holding the new claims
(over NBD with TLS on a key made for the snapshot), while the guest runs
on. With a guest agent the guest's file systems are frozen while the copy
begins (well under a second) and the snapshot is consistent; without one
it is crash-consistent, and says so. A stopped VM's disks are copied by
the pod. Works in both modes: the snapshot is a Secret VM-snapshot-NAME
(type ` + string(vmsnapshot.SecretType) + `) that owns the claims; deleting
the VM deletes neither.

Needs the rights to get the VM, to get, create and delete pods and create
pods/exec, to create persistentvolumeclaims and to create, update, list and
delete secrets in the VM's namespace.`,
		Example: fmt.Sprintf(`  # Take a snapshot before an upgrade of the guest
  %[1]s snapshot web --name before-upgrade

  # A nightly snapshot, keeping the last 7
  %[1]s snapshot web --keep 7

  # What there is
  %[1]s snapshot list web`, name),
		Args:              cobra.ExactArgs(1),
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
	f.StringVar(&o.Name, "name", "", "the snapshot's name (default: the time, e.g. 20261128-091500)")
	f.IntVar(&o.Keep, "keep", 0, "keep only the newest N snapshots of the VM, this one included (0: all)")
	f.DurationVar(&o.Timeout, "timeout", DefaultTimeout, "how long to wait for the snapshot pod to run")
	cmd.AddCommand(newListCmd(configFlags, streams), newDeleteCmd(configFlags, streams))
	return cmd
}

// Complete takes the VM's name and makes the client.
func (o *Options) Complete(args []string) error {
	o.VM = args[0]
	if o.Name == "" {
		o.Name = vmsnapshot.NewName(time.Now())
	}
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the flags, all at once.
func (o *Options) Validate() error {
	var errs []error
	if err := vmsnapshot.ValidName(o.Name); err != nil {
		errs = append(errs, fmt.Errorf("--name: %w", err))
	}
	if o.Keep < 0 {
		errs = append(errs, fmt.Errorf("--keep %d: must be 0 (keep all) or more", o.Keep))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be more than 0", o.Timeout))
	}
	return errors.Join(errs...)
}

// Run takes the snapshot, then deletes the oldest beyond --keep; ^C
// ends it, and what it made is deleted.
func (o *Options) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	vm, err := o.client.Get(ctx, o.VM)
	if err != nil {
		return err
	}
	snap, err := vmsnapshot.Take(ctx, vmsnapshot.Options{Client: o.client, Timeout: o.Timeout, Log: o.ErrOut}, vm, o.Name)
	if err != nil {
		return err
	}
	i := snap.Info
	how := i.Consistency
	if i.Consistency == vmsnapshot.Consistent {
		how += fmt.Sprintf(", the guest frozen for %.2fs", i.FrozenSeconds)
	} else if i.Why != "" {
		how += ": " + i.Why
	}
	disks := "disks"
	if len(i.Disks) == 1 {
		disks = "disk"
	}
	fmt.Fprintf(o.Out, "snapshot %s of vm %s/%s taken in %.1fs: %d %s, %s; %s\n", i.Name, vm.Namespace, vm.Name, i.Seconds, len(i.Disks), disks, size(i.Bytes), how)
	if o.Keep == 0 {
		return nil
	}
	snaps, err := vmsnapshot.List(ctx, o.client, vm.Namespace, vm.Name)
	if err != nil {
		return err
	}
	for len(snaps) > o.Keep {
		old := snaps[0]
		snaps = snaps[1:]
		if old.Secret.Name == snap.Secret.Name {
			continue
		}
		if err := vmsnapshot.Delete(ctx, o.client, old.Secret); err != nil {
			return err
		}
		fmt.Fprintf(o.Out, "snapshot %s of vm %s/%s deleted (--keep %d)\n", old.Info.Name, vm.Namespace, vm.Name, o.Keep)
	}
	return nil
}

// size is bytes in MiB or GiB.
func size(b int64) string {
	if b >= 10<<30 {
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", b>>20)
}

func newListCmd(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:               "list [VM] [-A]",
		Short:             "List the snapshots of a VM, or of every VM",
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completion.VMName(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := vmclient.New(configFlags)
			if err != nil {
				return err
			}
			ns, vm := c.Namespace, ""
			if all {
				ns = metav1.NamespaceAll
			}
			if len(args) == 1 {
				vm = args[0]
			}
			snaps, err := vmsnapshot.List(cmd.Context(), c, ns, vm)
			if err != nil {
				return err
			}
			if len(snaps) == 0 {
				fmt.Fprintln(streams.ErrOut, "No snapshots found.")
				return nil
			}
			w := tabwriter.NewWriter(streams.Out, 0, 8, 2, ' ', 0)
			if all {
				fmt.Fprint(w, "NAMESPACE\t")
			}
			fmt.Fprintln(w, "VM\tSNAPSHOT\tPHASE\tKIND\tCONSISTENCY\tDISKS\tSIZE\tAGE")
			for _, s := range snaps {
				if all {
					fmt.Fprintf(w, "%s\t", s.Secret.Namespace)
				}
				var bytes int64
				for _, d := range s.Info.Disks {
					bytes += d.Size
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", s.Info.VM, s.Info.Name, s.Info.Phase, s.Info.Kind, s.Info.Consistency,
					len(s.Info.Disks), size(bytes), duration.HumanDuration(time.Since(s.Secret.CreationTimestamp.Time)))
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVarP(&all, "all-namespaces", "A", false, "the snapshots of every namespace")
	return cmd
}

func newDeleteCmd(configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	return &cobra.Command{
		Use:               "delete VM SNAPSHOT...",
		Short:             "Delete snapshots of a VM: their Secrets and the claims with the copies",
		Args:              cobra.MinimumNArgs(2),
		ValidArgsFunction: completion.VMAndSnapshots(configFlags, ""),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := vmclient.New(configFlags)
			if err != nil {
				return err
			}
			var errs []error
			for _, name := range args[1:] {
				s, err := vmsnapshot.Get(cmd.Context(), c, c.Namespace, args[0], name)
				if err == nil {
					err = vmsnapshot.Delete(cmd.Context(), c, s.Secret)
				}
				if err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintf(streams.Out, "snapshot %s of vm %s/%s deleted\n", name, c.Namespace, args[0])
			}
			return errors.Join(errs...)
		},
	}
}
