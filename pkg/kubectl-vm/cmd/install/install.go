// Package install is "kubectl vm install": it puts the VirtualMachine CRD
// and vm-operator into a cluster, or prints their manifests.
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
  %[1]s install -n vmop --image registry.example.com/vm-operator:v1.0.0`

// Options are the options of the install command.
type Options struct {
	Namespace     string
	Image         string
	ImageRegistry string
	DryRun        bool
	Output        string
	Wait          bool
	Timeout       time.Duration

	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// NewCmd makes the install command. The namespace is the root's -n flag
// as given, not the kubeconfig's: the operator has a home of its own.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the VirtualMachine CRD and vm-operator into the cluster",
		Long: `Install the VirtualMachine CRD (vms.vmoperator.jdrupes.org) and vm-operator
into the cluster, by server-side apply: running it again updates the
installation and changes nothing else. It needs cluster-admin-like rights.

Installed, in this order: the CRD; the namespace (-n, default ` + install.DefaultNamespace + `);
the operator's ServiceAccount, ClusterRole and ClusterRoleBinding and its
leader-election Role and RoleBinding; the ClusterRole ` + install.RunnerClusterRole + ` that the
operator binds for the VMs' runner pods; the admission policy
vm-runner-own-vm that lets a runner change only its own VM; the
Deployment ` + install.OperatorName + `.

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
	cmd.Flags().StringVar(&o.ImageRegistry, "image-registry", "", "registry and path that hold vmop's images, e.g. a mirror for an air-gapped cluster: the operator's image and the runner image it renders come from there (default "+version.Registry+")")
	cmd.Flags().BoolVar(&o.DryRun, "dry-run", false, "print the manifests instead of installing them")
	cmd.Flags().StringVarP(&o.Output, "output", "o", "", "output format of --dry-run: "+strings.Join(manifest.Formats, " or ")+" (default "+manifest.FormatYAML+")")
	cmd.Flags().BoolVar(&o.Wait, "wait", false, "wait until the operator's Deployment is available")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", 2*time.Minute, "time limit of the whole installation, waits for the CRD and (--wait) the Deployment included")
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
	objs, err := install.Objects(install.Options{Namespace: o.Namespace, Image: o.Image, ImageRegistry: o.ImageRegistry})
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
	if o.Wait {
		return cluster.WaitAvailable(ctx, o.Namespace)
	}
	return nil
}
