// Package vm is the root of the kubectl vm plugin: it holds the
// subcommands and the kubectl flags they share.
package vm

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"

	vmopinstall "github.com/vmop/vmop/pkg/install"
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
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
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
	cmd.AddCommand(newVersionCmd(name, configFlags, streams))
	return cmd
}

// versionTimeout bounds the questions to the cluster: version answers
// even when the cluster does not.
const versionTimeout = 10 * time.Second

// versionOptions are the options of the version command.
type versionOptions struct {
	Client bool
	// Namespace is the operator's, as for install.
	Namespace string

	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

func newVersionCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &versionOptions{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of the plugin, the cluster and the operator",
		Long: `Print the version of the plugin and, unless --client is given, what the
cluster runs: the Kubernetes version of its API server, whether the
VirtualMachine CRD is installed, and the operator's Deployment (in the
namespace of -n, default ` + vmopinstall.DefaultNamespace + `) with its image and availability.
A cluster that cannot be asked is a warning, not an error.`,
		Example: fmt.Sprintf(`  # The plugin and what the cluster of the current context runs
  %[1]s version

  # The plugin only
  %[1]s version --client`, name),
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			o.Run(cmd.Context())
			return nil
		},
	}
	cmd.Flags().BoolVar(&o.Client, "client", false, "print the plugin's version only, without asking the cluster")
	return cmd
}

// Complete takes the operator's namespace from the root's flags.
func (o *versionOptions) Complete() {
	o.Namespace = install.Namespace(o.configFlags)
}

// Validate checks the namespace flag, unless the cluster is not asked.
func (o *versionOptions) Validate() error {
	if o.Client {
		return nil
	}
	return install.ValidateNamespace(o.Namespace)
}

// Run prints the versions; what it cannot learn from the cluster becomes
// a warning.
func (o *versionOptions) Run(ctx context.Context) {
	fmt.Fprintf(o.Out, "kubectl-vm %s\n", version.Get())
	fmt.Fprintf(o.Out, "Images: %s (install), %s (render)\n",
		version.Image("", version.OperatorImage), version.Image("", version.RunnerImage))
	if o.Client {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	if err := o.printCluster(ctx); err != nil {
		fmt.Fprintf(o.ErrOut, "warning: %v\n", err)
	}
}

func (o *versionOptions) printCluster(ctx context.Context) error {
	c, err := vmclient.New(o.configFlags)
	if err != nil {
		return err
	}
	// Discovery, unlike reading the CRD, is open to every user.
	disc := discovery.ToDiscoveryInterfaceWithContext(c.Kube.Discovery())
	info, err := disc.ServerVersionWithContext(ctx)
	if err != nil {
		return c.Explain(err)
	}
	fmt.Fprintf(o.Out, "Server: Kubernetes %s at %s\n", info.GitVersion, c.Host)
	crd := v1.Resource + "." + v1.Group
	switch _, err := disc.ServerResourcesForGroupVersionWithContext(ctx, v1.APIVersion); {
	case err == nil:
		fmt.Fprintf(o.Out, "CRD: %s installed\n", crd)
	case apierrors.IsNotFound(err):
		fmt.Fprintf(o.Out, "CRD: %s not installed\n", crd)
	default:
		return c.Explain(err)
	}
	dep, err := c.Kube.AppsV1().Deployments(o.Namespace).Get(ctx, vmopinstall.OperatorName, metav1.GetOptions{})
	switch {
	case err == nil:
		image, runner := "", ""
		for _, ctr := range dep.Spec.Template.Spec.Containers {
			if ctr.Name == vmopinstall.OperatorName {
				image, runner = ctr.Image, runnerImage(ctr)
			}
		}
		fmt.Fprintf(o.Out, "Operator: %s in %s, image %s, runner image %s, %d/%d available\n", dep.Name, dep.Namespace,
			image, runner, dep.Status.AvailableReplicas, ptr.Deref(dep.Spec.Replicas, 1))
	case apierrors.IsNotFound(err):
		fmt.Fprintf(o.Out, "Operator: %s not installed in %s\n", vmopinstall.OperatorName, o.Namespace)
	default:
		return c.Explain(err)
	}
	return nil
}

// runnerImage is the runner image that the operator container c gives
// VMs without spec.image: the runner of the operator's version (its
// image's tag), from its --image-registry.
func runnerImage(c corev1.Container) string {
	registry := version.Registry
	for _, a := range c.Args {
		if r, ok := strings.CutPrefix(a, "--image-registry="); ok {
			registry = r
		}
	}
	tag := "unknown"
	if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
		tag = c.Image[i+1:]
	}
	return version.Ref(registry, version.RunnerImage, tag)
}
