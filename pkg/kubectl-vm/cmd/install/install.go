// Package install is "kubectl vm install": it puts the VirtualMachine CRD,
// vm-operator and the node agent vm-node into a cluster, or prints their
// manifests.
package install

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/version"
)

const example = `  # Install the operator into vmop-system and wait until it runs
  %[1]s install --wait

  # Print the manifests instead, e.g. to commit them for Argo CD or Flux
  %[1]s install --dry-run > vmop-install.yaml

  # Install into another namespace with an image of your own
  %[1]s install -n vmop --image registry.example.com/vm-operator:v1.0.0

  # Only the node agent, on k0s, for VMs rendered into Git (no operator)
  %[1]s install --node-agent-only --kubelet-root-dir /var/lib/k0s/kubelet --wait

  # Let the node agent serve VMs that run a runner image of your own build too
  %[1]s install --runner-repository registry.example.com/me/vm-runner`

// kubeletRootDirs are the kubelet's usual root directories: upstream's,
// k0s', microk8s'.
var kubeletRootDirs = []string{install.DefaultKubeletRootDir, "/var/lib/k0s/kubelet", "/var/snap/microk8s/common/var/lib/kubelet"}

// Options are the options of the install command.
type Options struct {
	Namespace          string
	Image              string
	ImageRegistry      string
	RunnerRepositories []string
	KubeletRootDir     string
	NodeAgentOnly      bool
	DryRun             bool
	Output             string
	Wait               bool
	Timeout            time.Duration

	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// NewCmd makes the install command. The namespace is the root's -n flag
// as given, not the kubeconfig's: the operator has a home of its own.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the VirtualMachine CRD, vm-operator and the node agent into the cluster",
		Long: `Install the VirtualMachine CRD (vms.vmoperator.jdrupes.org), vm-operator and
the node agent ` + install.NodeAgentName + ` into the cluster, by server-side apply: running it
again updates the installation and changes nothing else. It needs
cluster-admin-like rights.

Installed, in this order: the CRD; the namespace (-n, default ` + install.DefaultNamespace + `);
the operator's ServiceAccount, ClusterRole and ClusterRoleBinding and its
leader-election Role and RoleBinding; the ClusterRole ` + install.RunnerClusterRole + ` that the
operator binds for the VMs' runner pods; the ClusterRole ` + install.UserClusterRole + ` for people who
run VMs and the admission policy ` + install.UserClusterRole + ` that keeps their exec to
vm-runner; the admission policy vm-runner-own-vm that lets a runner only
stop its own VM; the admission policy vm-node-devices that keeps the node
agent's devices to VM pods; the node agent's ServiceAccount, ClusterRole
and ClusterRoleBinding and its DaemonSet ` + install.NodeAgentName + `; the Deployment ` + install.OperatorName + `.

The namespace is created with the label
pod-security.kubernetes.io/enforce=privileged, which the node agent needs.
A namespace that exists and that install did not create is not
relabelled: install refuses unless it enforces privileged already.

The node agent is vmop's one privileged part, on every node: it gives VM
pods their devices (the resource devices.vmop.io/vm) and sets up their
network, so that VM pods need no privilege. It reaches VM pods through the
kubelet's pod directories: where the kubelet's --root-dir is not
` + install.DefaultKubeletRootDir + `, give it with --kubelet-root-dir. With --node-agent-only
only the namespace and the node agent are installed, for clusters whose
VMs are rendered (GitOps) and where no operator runs. The node agent serves
only pods that run a runner image of the repository of --image-registry;
for VMs whose spec.image names a runner image from another repository,
give that repository with --runner-repository.

With --dry-run the manifests are printed instead and no cluster is
contacted.`,
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
	cmd.Flags().StringVar(&o.Image, "image", "", "image of the operator (default: "+version.Image("", version.OperatorImage)+", or from --image-registry)")
	cmd.Flags().StringVar(&o.ImageRegistry, "image-registry", "", "registry and path that hold vmop's images, e.g. a mirror for an air-gapped cluster: the operator's and the node agent's images and the runner image the operator renders come from there, and the node agent serves pods of runner images from there (default "+version.Registry+")")
	cmd.Flags().StringArrayVar(&o.RunnerRepositories, "runner-repository", nil, "the node agent also trusts the runner images of `REPO`, an image repository without tag or digest such as registry.example.com/me/vm-runner, besides those from --image-registry: for VMs whose spec.image names a runner image from another repository (your own build of vm-runner, a mirror under another path); repeat for more")
	cmd.Flags().StringVar(&o.KubeletRootDir, "kubelet-root-dir", install.DefaultKubeletRootDir, "the kubelet's --root-dir on the nodes, e.g. /var/lib/k0s/kubelet for k0s, /var/snap/microk8s/common/var/lib/kubelet for microk8s: the node agent reaches VM pods through its pods/")
	cmd.Flags().BoolVar(&o.NodeAgentOnly, "node-agent-only", false, "only the node agent (and its namespace), for clusters where VMs are rendered by GitOps and no operator runs")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "print the manifests instead of installing them")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "output format of --dry-run: "+strings.Join(manifest.Formats, " or ")+" (default "+manifest.FormatYAML+")")
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "wait until the operator's Deployment is available and the node agent is ready on every node it is scheduled to")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "time limit of the whole installation, waits for the CRD and (--wait) the Deployment and DaemonSet included")
	// Paths on the nodes, not here: the usual ones, not local directories.
	_ = cmd.RegisterFlagCompletionFunc("kubelet-root-dir", cobra.FixedCompletions(kubeletRootDirs, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(manifest.Formats, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// Complete takes the namespace from the root's flags.
func (o *Options) Complete() error {
	o.Namespace = Namespace(o.configFlags)
	return nil
}

// Namespace is the operator's namespace: the root's -n flag as given, not
// the kubeconfig context's (that is where the user works, not where the
// operator lives), else install.DefaultNamespace. Uninstall uses it too.
func Namespace(configFlags *genericclioptions.ConfigFlags) string {
	if configFlags != nil && configFlags.Namespace != nil && *configFlags.Namespace != "" {
		return *configFlags.Namespace
	}
	return install.DefaultNamespace
}

// ValidateNamespace checks the namespace flag; uninstall uses it too.
func ValidateNamespace(ns string) error {
	if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
		return fmt.Errorf("--namespace %q: %s", ns, strings.Join(msgs, "; "))
	}
	return nil
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if err := ValidateNamespace(o.Namespace); err != nil {
		return err
	}
	if o.ImageRegistry != "" {
		if err := version.ValidateRegistry(o.ImageRegistry); err != nil {
			return fmt.Errorf("--image-registry: %w", err)
		}
	}
	for _, r := range o.RunnerRepositories {
		if err := install.ValidateRunnerRepository(r); err != nil {
			return fmt.Errorf("--runner-repository: %w", err)
		}
	}
	if err := install.ValidateKubeletRootDir(o.KubeletRootDir); err != nil {
		return fmt.Errorf("--kubelet-root-dir: %w", err)
	}
	if o.NodeAgentOnly && o.Image != "" {
		return errors.New("--image is the operator's, which --node-agent-only does not install")
	}
	if o.Output != "" {
		if !o.DryRun {
			return errors.New("--output applies only with --dry-run")
		}
		if !slices.Contains(manifest.Formats, o.Output) {
			return fmt.Errorf("--output %q is not supported: use one of %s", o.Output, strings.Join(manifest.Formats, ", "))
		}
	}
	if o.DryRun && o.Wait {
		return errors.New("--wait cannot be used with --dry-run: nothing is installed to wait for")
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", o.Timeout)
	}
	return nil
}

// Run prints or applies the objects.
func (o *Options) Run(ctx context.Context) error {
	objs, err := install.Objects(install.Options{
		Namespace:          o.Namespace,
		Image:              o.Image,
		ImageRegistry:      o.ImageRegistry,
		RunnerRepositories: o.RunnerRepositories,
		KubeletRootDir:     o.KubeletRootDir,
		NodeAgentOnly:      o.NodeAgentOnly,
	})
	if err != nil {
		return err
	}
	if o.DryRun {
		format := o.Output
		if format == "" {
			format = manifest.FormatYAML
		}
		out := make([]any, len(objs))
		for i, obj := range objs {
			out[i] = obj.Object
		}
		return manifest.WriteObjects(o.Out, format, out...)
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
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := cluster.Apply(ctx, objs); err != nil {
		return err
	}
	if !o.Wait {
		return nil
	}
	if !o.NodeAgentOnly {
		if err := cluster.WaitAvailable(ctx, o.Namespace); err != nil {
			return err
		}
	}
	return cluster.WaitNodeAgent(ctx, o.Namespace)
}
