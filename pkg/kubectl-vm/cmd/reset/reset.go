// Package reset is "kubectl vm reset": a hard reset of a running guest,
// like its reset button, by one more on the VM's reset counter.
package reset

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/util/retry"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// Options are the options of the reset command.
type Options struct {
	Name string

	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the reset command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	return &cobra.Command{
		Use:   "reset NAME",
		Short: "Hard-reset a running VM, like its reset button",
		Long: `Hard-reset a running guest: it reboots at once, without shutting down (what
is not on its disks is lost). The pod stays. It raises the VM's annotation
` + v1.AnnotationResetCounter + `, which the runner turns into a reset;
without a VirtualMachine (GitOps mode) it raises resetCounter in the VM's
ConfigMap and sets the pod's annotation ` + podsync.AnnotationConfigVersion + `,
which makes the kubelet pass the change on at once.`,
		Example: fmt.Sprintf(`  # Reset a hung guest
  %[1]s reset test-vm`, name),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.VMName(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
}

// Complete takes the name and makes the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Run raises the counter of a running VM.
func (o *Options) Run(ctx context.Context) error {
	c := o.client
	vm, err := c.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	pod, err := c.Pod(ctx, vm)
	if err != nil {
		return err
	}
	if pod == nil || pod.DeletionTimestamp != nil {
		return fmt.Errorf("%s is not running: nothing to reset", o.Name)
	}
	if vm.Mode == vmclient.ModeOperator {
		// The resourceVersion keeps two resets at once from counting as
		// one; a conflict (with those, or with the operator's status
		// writes) is tried again on the new version.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := c.Get(ctx, o.Name)
			if err != nil {
				return err
			}
			n, ferr := cur.VM.ResetCounter()
			if ferr != nil {
				return fmt.Errorf("%s: %s", o.Name, ferr.Error())
			}
			patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
				"resourceVersion": cur.Object.GetResourceVersion(),
				"annotations":     map[string]string{v1.AnnotationResetCounter: strconv.FormatInt(n+1, 10)},
			}})
			if err != nil {
				return err
			}
			_, err = c.VMs(vm.Namespace).Patch(ctx, vm.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: vmclient.FieldManager})
			return err
		})
		if err != nil {
			return c.Explain(err)
		}
	} else {
		err := c.UpdateConfig(ctx, vm, o.ErrOut, func(cfg *runnerconfig.Config) error {
			cfg.ResetCounter++
			return nil
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(o.ErrOut, vmclient.GitOpsWarning+"\n", vm.Namespace, vm.Name)
	}
	fmt.Fprintf(o.Out, "%s reset\n", o.Name)
	return nil
}
