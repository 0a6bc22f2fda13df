// Package vm is the root of the kubectl vm plugin: it holds the
// subcommands and the kubectl flags they share.
package vm

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/cmd/install"
	"github.com/vmop/vmop/pkg/cmd/render"
	"github.com/vmop/vmop/pkg/cmd/uninstall"
	"github.com/vmop/vmop/pkg/version"
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
		Annotations:       map[string]string{cobra.CommandDisplayNameAnnotation: name},
		SilenceUsage:      true,
		SilenceErrors:     true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	cmd.SetIn(streams.In)
	cmd.SetOut(streams.Out)
	cmd.SetErr(streams.ErrOut)
	configFlags.AddFlags(cmd.PersistentFlags())
	cmd.AddCommand(render.NewCmd(name, configFlags, streams))
	cmd.AddCommand(install.NewCmd(name, configFlags, streams))
	cmd.AddCommand(uninstall.NewCmd(name, configFlags, streams))
	cmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version of the plugin",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(streams.Out, version.Get())
		},
	})
	return cmd
}
