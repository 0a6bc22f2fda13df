// Package app is the root of the kubectl vm plugin: it holds the
// subcommands and the kubectl flags they share.
package app

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/cdrom"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/clone"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/console"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/create"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/disk"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/expose"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/install"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/list"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/logs"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/portforward"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/render"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/reset"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/restore"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/set"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/snapshot"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/ssh"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/state"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/status"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/uninstall"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/version"
)

// DisplayName is how a binary called argv0 is shown in help: "kubectl vm"
// when kubectl runs it as a plugin, else its own name.
func DisplayName(argv0 string) string {
	base := filepath.Base(argv0)
	if strings.HasPrefix(base, "kubectl-") || strings.HasPrefix(base, "kubectl_") {
		return "kubectl " + strings.ReplaceAll(base[len("kubectl-"):], "_", "-")
	}
	return base
}

const example = `  # Render VirtualMachine manifests into plain objects: no cluster needed
  %[1]s render -R -f vms/ | kubectl apply -f -

  # Install the operator, then start a VM and wait until it runs
  %[1]s install --wait
  kubectl apply -f test-vm.yaml
  %[1]s start test-vm --wait

  # The VMs of a namespace, and one of them in detail
  %[1]s list -n vmop-demo
  %[1]s status test-vm -n vmop-demo

  # Change a running VM: more CPUs, an installer image
  %[1]s set test-vm --cpus 4
  %[1]s cdrom test-vm insert debian-12.iso

  # Stop it: the guest shuts down
  %[1]s stop test-vm

  # The versions of the plugin, the cluster and the operator
  %[1]s version`

// NewCmd makes the root command.
func NewCmd(name string, streams genericiooptions.IOStreams) *cobra.Command {
	configFlags := genericclioptions.NewConfigFlags(true)
	cmd := &cobra.Command{
		Use:   "vm",
		Short: "Run and manage virtual machines on Kubernetes",
		Long: `Run and manage qemu virtual machines on Kubernetes, described by
VirtualMachine manifests (vmoperator.jdrupes.org/v1).

With no arguments and a ResourceList on stdin, the command runs as a
kustomize/kpt KRM function that renders the VirtualMachines of the list.`,
		Example:           fmt.Sprintf(example, name),
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: name},
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	configFlags.AddFlags(cmd.PersistentFlags())
	_ = cmd.RegisterFlagCompletionFunc("namespace", completion.Namespaces(configFlags))
	_ = cmd.RegisterFlagCompletionFunc("context", completion.Contexts(configFlags))
	cmd.AddCommand(render.NewCmd(name, configFlags, streams))
	cmd.AddCommand(install.NewCmd(name, configFlags, streams))
	cmd.AddCommand(uninstall.NewCmd(name, configFlags, streams))
	cmd.AddCommand(create.NewCmd(name, configFlags, streams))
	cmd.AddCommand(list.NewCmd(name, configFlags, streams))
	cmd.AddCommand(status.NewCmd(name, configFlags, streams))
	cmd.AddCommand(state.NewStartCmd(name, configFlags, streams))
	cmd.AddCommand(state.NewStopCmd(name, configFlags, streams))
	cmd.AddCommand(state.NewRestartCmd(name, configFlags, streams))
	cmd.AddCommand(reset.NewCmd(name, configFlags, streams))
	cmd.AddCommand(set.NewCmd(name, configFlags, streams))
	cmd.AddCommand(cdrom.NewCmd(name, configFlags, streams))
	cmd.AddCommand(console.NewCmd(name, configFlags, streams))
	cmd.AddCommand(logs.NewCmd(name, configFlags, streams))
	cmd.AddCommand(portforward.NewCmd(name, configFlags, streams))
	cmd.AddCommand(expose.NewCmd(name, configFlags, streams))
	cmd.AddCommand(disk.NewCmd(name, configFlags, streams))
	cmd.AddCommand(snapshot.NewCmd(name, configFlags, streams))
	cmd.AddCommand(restore.NewCmd(name, configFlags, streams))
	cmd.AddCommand(clone.NewCmd(name, configFlags, streams))
	cmd.AddCommand(ssh.NewCmd(name, configFlags, streams))
	cmd.AddCommand(completion.NewCmd(name, streams))
	cmd.AddCommand(version.NewCmd(name, configFlags, streams))
	return cmd
}
