// Package version is kubectl vm version: the versions of the plugin, of
// the cluster's API server and of the operator and runner images.
package version

import (
	"context"
	"fmt"
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
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/install"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	buildversion "github.com/vmop/vmop/pkg/version"
)

// versionTimeout bounds the questions to the cluster: version answers
// even when the cluster does not.
const versionTimeout = 10 * time.Second

// options are the options of the version command.
type options struct {
	Client bool
	// Namespace is the operator's, as for install.
	Namespace string

	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// NewCmd makes the version command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{configFlags: configFlags, IOStreams: streams}
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
func (o *options) Complete() {
	o.Namespace = install.Namespace(o.configFlags)
}

// Validate checks the namespace flag, unless the cluster is not asked.
func (o *options) Validate() error {
	if o.Client {
		return nil
	}
	return install.ValidateNamespace(o.Namespace)
}

// Run prints the versions; what it cannot learn from the cluster becomes
// a warning.
func (o *options) Run(ctx context.Context) {
	fmt.Fprintf(o.Out, "kubectl-vm %s\n", buildversion.Get())
	fmt.Fprintf(o.Out, "Images: %s (install), %s (render)\n",
		buildversion.Image("", buildversion.OperatorImage), buildversion.Image("", buildversion.RunnerImage))
	if o.Client {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	if err := o.printCluster(ctx); err != nil {
		fmt.Fprintf(o.ErrOut, "warning: %v\n", err)
	}
}

func (o *options) printCluster(ctx context.Context) error {
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
	registry := buildversion.Registry
	for _, a := range c.Args {
		if r, ok := strings.CutPrefix(a, "--image-registry="); ok {
			registry = r
		}
	}
	tag := "unknown"
	if i := strings.LastIndex(c.Image, ":"); i > strings.LastIndex(c.Image, "/") {
		tag = c.Image[i+1:]
	}
	return buildversion.Ref(registry, buildversion.RunnerImage, tag)
}
