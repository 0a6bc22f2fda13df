package completion

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmsnapshot"
)

// Timeout bounds each request for completions: the shell waits for it, and
// TAB must not hang on a cluster that does not answer.
const Timeout = 5 * time.Second

// VMNames completes any number of VM names, skipping those already given:
// the VMs of the namespace that -n, --context and --kubeconfig select, in
// both modes (see vmclient.List). A command that takes VM names sets
//
//	ValidArgsFunction: completion.VMNames(configFlags),
//
// with the root's configFlags; cobra has parsed the flags of the command
// line by the time it calls the function.
func VMNames(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return vmNames(cmd.Context(), configFlags, args, toComplete)
	}
}

// VMName completes the first argument only, for commands such as
// "cdrom NAME insert IMAGE" whose later arguments are no VM names:
//
//	ValidArgsFunction: completion.VMName(configFlags),
func VMName(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return vmNames(cmd.Context(), configFlags, args, toComplete)
	}
}

func vmNames(ctx context.Context, configFlags *genericclioptions.ConfigFlags, given []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return FromCluster(ctx, configFlags, toComplete, func(ctx context.Context, c *vmclient.Client) ([]string, error) {
		vms, err := c.List(ctx, vmclient.ListOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, vm := range vms {
			if !slices.Contains(given, vm.Name) {
				names = append(names, vm.Name)
			}
		}
		return names, nil
	})
}

// Namespaces completes the namespaces of the cluster, for -n.
func Namespaces(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return FromCluster(cmd.Context(), configFlags, toComplete, func(ctx context.Context, c *vmclient.Client) ([]string, error) {
			list, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			names := make([]string, 0, len(list.Items))
			for _, ns := range list.Items {
				names = append(names, ns.Name)
			}
			return names, nil
		})
	}
}

// StorageClasses completes the cluster's StorageClasses, e.g. for the
// class of a disk.
func StorageClasses(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return FromCluster(cmd.Context(), configFlags, toComplete, func(ctx context.Context, c *vmclient.Client) ([]string, error) {
			list, err := c.Kube.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, err
			}
			names := make([]string, 0, len(list.Items))
			for _, sc := range list.Items {
				names = append(names, sc.Name)
			}
			return names, nil
		})
	}
}

// Contexts completes the contexts of the kubeconfig, for --context.
func Contexts(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		cfg, err := configFlags.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			cobra.CompDebugln(err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return withPrefix(slices.Sorted(maps.Keys(cfg.Contexts)), toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// FromCluster completes with what list finds in the cluster within
// Timeout. An error means no completions: the shell would show an error
// message as a completion, so it goes only to cobra's debug log
// (BASH_COMP_DEBUG_FILE).
func FromCluster(ctx context.Context, configFlags *genericclioptions.ConfigFlags, toComplete string, list func(context.Context, *vmclient.Client) ([]string, error)) ([]cobra.Completion, cobra.ShellCompDirective) {
	c, err := vmclient.New(configFlags)
	if err != nil {
		cobra.CompDebugln(err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	names, err := list(ctx, c)
	if err != nil {
		cobra.CompDebugln(err.Error(), false)
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func withPrefix(names []string, prefix string) []cobra.Completion {
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out
}

// VMAndSnapshots completes "VM SNAPSHOT...": a VM name first, then the
// names of its snapshots, or of the VM that the command's flag from
// names when given (restore --from).
func VMAndSnapshots(configFlags *genericclioptions.ConfigFlags, from string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return vmNames(cmd.Context(), configFlags, args, toComplete)
		}
		vm := args[0]
		if f := cmd.Flags().Lookup(from); from != "" && f != nil && f.Value.String() != "" {
			vm = f.Value.String()
		}
		return FromCluster(cmd.Context(), configFlags, toComplete, func(ctx context.Context, c *vmclient.Client) ([]string, error) {
			snaps, err := vmsnapshot.List(ctx, c, c.Namespace, vm)
			if err != nil {
				return nil, err
			}
			var names []string
			for _, s := range snaps {
				if !slices.Contains(args[1:], s.Info.Name) {
					names = append(names, s.Info.Name)
				}
			}
			return names, nil
		})
	}
}
