// Package uninstall is "kubectl vm uninstall": it removes what
// "kubectl vm install" put into the cluster, VM disks excepted.
package uninstall

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/install"
	cmdinstall "github.com/vmop/vmop/pkg/kubectl-vm/cmd/install"
)

const example = `  # Remove the operator, keep the CRD and so every VirtualMachine
  %[1]s uninstall

  # Remove everything, VirtualMachines included (their disks stay)
  %[1]s uninstall --delete-crd --yes

  # Remove only the node agent
  %[1]s uninstall --node-agent-only`

// Options are the options of the uninstall command.
type Options struct {
	Namespace     string
	DeleteCRD     bool
	Yes           bool
	NodeAgentOnly bool

	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// NewCmd makes the uninstall command. The namespace is the root's -n flag
// as given, as for install.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove vm-operator and the node agent from the cluster",
		Long: `Remove what "install" put into the cluster, in reverse order: the
Deployment ` + install.OperatorName + `, the node agent's DaemonSet ` + install.NodeAgentName + `, the admission
policies, the ClusterRoles, Roles and their bindings, the ServiceAccounts,
and the namespace (-n, default ` + install.DefaultNamespace + `) if install created it. Objects
that are not there are skipped. What the operator made for VMs stays, e.g. the ServiceAccount
and RoleBinding ` + install.RunnerRoleBinding + ` in each VM namespace.

With --node-agent-only only what "install --node-agent-only" installs
goes: the node agent's DaemonSet, ClusterRoleBinding, ClusterRole,
ServiceAccount and admission policy, and the namespace unless the
operator's Deployment is in it. Running VMs keep running; VM pods that start afterwards wait for a
node with the agent.

The CRD stays, and with it every VirtualMachine, unless --delete-crd is
given: that deletes every VirtualMachine in the cluster and, by owner
references, their StatefulSets, so it needs --yes.

PersistentVolumeClaims, the VMs' disks, are never deleted: a namespace
that holds any is kept.`,
		Example:           fmt.Sprintf(example, name),
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.DeleteCRD, "delete-crd", false, "also delete the CRD, and so every VirtualMachine")
	cmd.Flags().BoolVar(&o.Yes, "yes", false, "confirm --delete-crd")
	cmd.Flags().BoolVar(&o.NodeAgentOnly, "node-agent-only", false, "remove only the node agent (and its namespace, unless the operator is there)")
	return cmd
}

// Complete takes the namespace from the root's flags, as install does.
func (o *Options) Complete() error {
	o.Namespace = cmdinstall.Namespace(o.configFlags)
	return nil
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := cmdinstall.ValidateNamespace(o.Namespace); err != nil {
		return err
	}
	if o.NodeAgentOnly && o.DeleteCRD {
		return errors.New("--delete-crd cannot be used with --node-agent-only: the CRD is not the node agent's")
	}
	if o.DeleteCRD && !o.Yes {
		return errors.New("--delete-crd deletes every VirtualMachine in the cluster and, by owner references, their StatefulSets: add --yes to confirm")
	}
	return nil
}

// Run deletes the installed objects.
func (o *Options) Run(ctx context.Context) error {
	objs, err := install.Objects(install.Options{Namespace: o.Namespace, NodeAgentOnly: o.NodeAgentOnly})
	if err != nil {
		return err
	}
	if !o.DeleteCRD {
		objs = slices.DeleteFunc(objs, func(u *unstructured.Unstructured) bool {
			return u.GetKind() == "CustomResourceDefinition"
		})
	}
	config, err := o.configFlags.ToRESTConfig()
	if err != nil {
		return err
	}
	mapper, err := o.configFlags.ToRESTMapper()
	if err != nil {
		return err
	}
	cluster, err := install.Connect(config, mapper, o.Out)
	if err != nil {
		return err
	}
	return cluster.Delete(ctx, objs)
}
