// Package set is "kubectl vm set": live changes of a VM's CPUs and RAM,
// within its maxima, which the runner applies without a restart.
package set

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// Options are the options of the set command.
type Options struct {
	Name string
	CPUs int32
	RAM  string

	ram         resource.Quantity
	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the set command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "set NAME [--cpus N] [--ram SIZE]",
		Short: "Change a VM's CPUs and RAM while it runs",
		Long: `Change the CPUs and RAM a VM uses (spec.vm.currentCpus and currentRam),
up to its maximumCpus and maximumRam. The runner hot-plugs CPUs and moves
the memory balloon: the guest keeps running. Without a VirtualMachine
(GitOps mode) the change goes into the VM's ConfigMap, and the next sync
from Git undoes it; the pod's annotation ` + podsync.AnnotationConfigVersion + `
then makes the kubelet pass the change on at once (without the right to
patch pods it takes up to a minute or so).`,
		Example: fmt.Sprintf(`  # Give a VM 4 CPUs and 8 GiB
  %[1]s set test-vm --cpus 4 --ram 8Gi`, name),
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
	cmd.Flags().Int32Var(&o.CPUs, "cpus", 0, "CPUs the guest uses (spec.vm.currentCpus)")
	cmd.Flags().StringVar(&o.RAM, "ram", "", "RAM the guest uses, e.g. 4Gi (spec.vm.currentRam)")
	return cmd
}

// Complete takes the name and makes the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.CPUs == 0 && o.RAM == "" {
		return errors.New("nothing to set: give --cpus, --ram or both")
	}
	if o.CPUs < 0 {
		return fmt.Errorf("--cpus must be at least 1, not %d", o.CPUs)
	}
	if o.RAM != "" {
		q, err := resource.ParseQuantity(o.RAM)
		if err != nil || q.Sign() <= 0 {
			return fmt.Errorf("--ram %q: not a size such as 4Gi or 512Mi", o.RAM)
		}
		o.ram = q
	}
	return nil
}

// Run checks the values against the VM's maxima and changes the VM.
func (o *Options) Run(ctx context.Context) error {
	c := o.client
	vm, err := c.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	if vm.Mode == vmclient.ModeOperator {
		spec := vm.VM.DeepCopy()
		spec.Default()
		if err := o.check(*spec.Spec.VM.MaximumCPUs, spec.Spec.VM.MaximumRAM.Bytes(), "spec.vm."); err != nil {
			return err
		}
		patch := map[string]any{}
		if o.CPUs > 0 {
			patch["currentCpus"] = o.CPUs
		}
		if o.RAM != "" {
			patch["currentRam"] = o.ram.String()
		}
		if err := c.PatchSpec(ctx, vm, patch); err != nil {
			return err
		}
	} else {
		err := c.UpdateConfig(ctx, vm, o.ErrOut, func(cfg *runnerconfig.Config) error {
			if err := o.check(cfg.VM.MaximumCPUs, cfg.VM.MaximumRAM.Bytes, "ConfigMap "+vm.Name+": /Runner.vm."); err != nil {
				return err
			}
			if o.CPUs > 0 {
				cfg.VM.CurrentCPUs = o.CPUs
			}
			if o.RAM != "" {
				cfg.VM.CurrentRAM = runnerconfig.Size{Bytes: o.ram.Value()}
			}
			return nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.ErrOut, vmclient.GitOpsWarning+"\n", vm.Namespace, vm.Name)
	}
	fmt.Fprintf(o.Out, "%s set\n", o.Name)
	return nil
}

// check refuses values above the maxima (0: not known), naming the flag
// and the field that limits it.
func (o *Options) check(maxCPUs int32, maxRAM int64, prefix string) error {
	if o.CPUs > 0 && maxCPUs > 0 && o.CPUs > maxCPUs {
		return fmt.Errorf("--cpus %d: more than %smaximumCpus (%d); raising the maximum needs a restart", o.CPUs, prefix, maxCPUs)
	}
	if o.RAM != "" && maxRAM > 0 && o.ram.Value() > maxRAM {
		return fmt.Errorf("--ram %s: more than %smaximumRam (%s); raising the maximum needs a restart",
			o.RAM, prefix, v1.FormatBytes(maxRAM))
	}
	return nil
}
