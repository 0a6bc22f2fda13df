// Package create is "kubectl vm create": a VirtualMachine from flags, as
// "kubectl create deployment" makes a Deployment, either printed (for Git)
// or created in the cluster. The VM is defaulted, validated and rendered by
// pkg/api/v1 and pkg/render before anything is printed or sent, so that
// what the command makes is exactly what "kubectl vm render" accepts.
package create

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
)

// Values of --dry-run, as kubectl's.
const (
	DryRunNone   = "none"
	DryRunClient = "client"
	DryRunServer = "server"
)

// DryRuns lists the values of --dry-run.
var DryRuns = []string{DryRunNone, DryRunClient, DryRunServer}

// resourceName is how kubectl names the kind in "created" lines.
const resourceName = "virtualmachine." + v1.Group

const example = `  # Print a VM with 2 CPUs, 4 GiB, a 40 GiB system disk and an installer CD,
  # to commit it to Git (nothing is sent to the cluster)
  %[1]s create debian --cpus 2 --ram 4Gi --disk 40Gi --cdrom debian-12.iso -o yaml

  # Create it in the cluster, running, on the storage class "fast", with an
  # SSH key for cloud-init's default user
  %[1]s create debian -n vms --cpus 2 --ram 4Gi --disk 40Gi,fast \
      --ssh-key ~/.ssh/id_ed25519.pub --running

  # Ask the API server whether it would accept the VM, and show what it stores
  %[1]s create debian --ram 4Gi --disk 40Gi --dry-run=server -o yaml

  # A server from Debian's cloud image, with your SSH key, started at once
  %[1]s create web --disk 20Gi --ssh-key ~/.ssh/id_ed25519.pub --running \
    --image https://cloud.debian.org/images/cloud/trixie/latest/debian-13-genericcloud-amd64.qcow2`

// Options are the options of the create command.
type Options struct {
	Name string
	// CPUs and RAM are the current values; MaxCPUs and MaxRAM the
	// maxima, which default to them.
	CPUs, MaxCPUs int32
	RAM, MaxRAM   string
	// Disks are --disk values SIZE[,STORAGECLASS]; the first boots.
	Disks []string
	// VolumeMode is every disk's volumeMode: Block or Filesystem.
	VolumeMode string
	// Image fills the system disk at the first start: a URL or a file of
	// the image repository; ImageChecksum is its "sha256:<hex>".
	Image, ImageChecksum string
	// CDROMs are images of CD drives, after the disks in the boot order.
	CDROMs []string
	// Networks are --network values: pod, user, tap, tap:BRIDGE or none.
	Networks     []string
	UserDataFile string
	SSHKeyFiles  []string
	Running      bool
	Output       string
	DryRun       string

	// given holds the flags given on the command line (unset numbers
	// are not the same as 0).
	given       func(name string) bool
	namespace   string
	vm          *v1.VirtualMachine
	configFlags *genericclioptions.ConfigFlags
	genericiooptions.IOStreams
}

// NewCmd makes the create command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "create NAME [--cpus N] [--ram SIZE] [--disk SIZE[,CLASS]]... [--image URL|FILE [--image-checksum sha256:HEX|sha512:HEX]] [--cdrom IMAGE]... [-o yaml|json]",
		Short: "Create a VirtualMachine from flags, or print it for Git",
		Long: `Create a VirtualMachine (` + v1.APIVersion + `) from flags, as kubectl create
deployment makes a Deployment. The VM is checked and rendered exactly as
"kubectl vm render" and the operator do before anything is sent; every
problem names its flag. What is not given takes the VirtualMachine's
defaults (1 CPU, 1Gi, UEFI, a SPICE display, state Stopped).

--cpus and --ram set currentCpus and currentRam; maximumCpus and
maximumRam are --max-cpus and --max-ram, or the same values (raise them to
leave room for "kubectl vm set" later). Each --disk is a volume claim
template (volumeMode Block, or --volume-mode Filesystem for storage
classes that have no Block volumes, e.g. local-path): the first is the system disk ("system",
bootindex 0), the others are "data-1", "data-2", ... Each --cdrom is a CD
drive with an image of the image repository, a URL, or "" for an empty
drive; CD drives boot after the system disk, so an installer CD starts
while the disk is empty. --image fills the system disk at the VM's first
start instead, from a cloud image (an http or https URL, a file of the
image repository, or docker://IMAGE for a containerDisk image that holds
the disk in /disk), checked against --image-checksum first when given; a
disk that holds data is never overwritten.

--cloud-init-user-data is a cloud-config YAML file (a mapping). --ssh-key
adds the keys of a public key file to its top-level ssh_authorized_keys,
which cloud-init gives to the guest's default user; keys already listed
there stay, and without --cloud-init-user-data the user data is just
that list.

With -o the VM is printed and nothing is sent to the cluster, unless
--dry-run=server asks the API server to check it and prints what it would
store. Without -o the VM is created; a VM of that name that exists is an
error and stays as it is.`,
		Example:           fmt.Sprintf(example, name),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args, cmd.Flags()); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.Int32Var(&o.CPUs, "cpus", 0, "CPUs the guest uses (spec.vm.currentCpus)")
	f.Int32Var(&o.MaxCPUs, "max-cpus", 0, "CPUs the guest may be given while it runs (spec.vm.maximumCpus; default --cpus)")
	f.StringVar(&o.RAM, "ram", "", "RAM the guest uses, e.g. 4Gi (spec.vm.currentRam)")
	f.StringVar(&o.MaxRAM, "max-ram", "", "RAM the guest may be given while it runs (spec.vm.maximumRam; default --ram)")
	f.StringArrayVar(&o.Disks, "disk", nil, "a disk SIZE[,STORAGECLASS], e.g. 40Gi or 40Gi,fast; may repeat, the first is the system disk")
	f.StringVar(&o.VolumeMode, "volume-mode", volumeModes[0], "the disks' volumeMode: Block (qemu gets the device) or Filesystem (qemu gets a disk.img file on it, for storage classes without Block volumes, e.g. local-path)")
	f.StringVar(&o.Image, "image", "", "an image (qcow2 or raw, maybe gz, xz or zstd compressed: an http(s) URL, a file of the image repository, or docker://IMAGE, a containerDisk) that fills the system disk at the first start, e.g. a cloud image")
	f.StringVar(&o.ImageChecksum, "image-checksum", "", "the --image file's sha256:HEX or sha512:HEX, checked before anything is written")
	f.StringArrayVar(&o.CDROMs, "cdrom", nil, `a CD drive with an image: a file of the image repository, a URL, or "" (empty drive); may repeat`)
	f.StringArrayVar(&o.Networks, "network", nil, "a network card: pod (the pod's network: the guest is reached at the pod's IP), user (qemu's user network), tap or tap:BRIDGE (a bridge of the node), or none; may repeat (default pod)")
	f.StringVar(&o.UserDataFile, "cloud-init-user-data", "", "cloud-init user data: a cloud-config YAML file")
	f.StringArrayVar(&o.SSHKeyFiles, "ssh-key", nil, "a public key file (e.g. ~/.ssh/id_ed25519.pub) whose keys cloud-init gives the default user; may repeat")
	f.BoolVar(&o.Running, "running", false, "start the VM at once (spec.vm.state Running; default Stopped)")
	f.StringVarP(&o.Output, "output", "o", "", "print the VM in this format ("+strings.Join(manifest.Formats, " or ")+") instead of creating it")
	f.StringVar(&o.DryRun, "dry-run", DryRunNone, "client: only check the VM; server: let the API server check it too; nothing is created")
	f.Lookup("dry-run").NoOptDefVal = DryRunClient
	_ = cmd.MarkFlagFilename("cloud-init-user-data", "yaml", "yml")
	_ = cmd.MarkFlagFilename("ssh-key", "pub")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(manifest.Formats, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("dry-run", cobra.FixedCompletions(DryRuns, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("network", cobra.FixedCompletions([]string{networkPod, networkUser, networkTap, networkNone}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("disk", completeDisk(configFlags))
	_ = cmd.RegisterFlagCompletionFunc("volume-mode", cobra.FixedCompletions(volumeModes, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("cdrom", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("image", cobra.NoFileCompletions)
	_ = cmd.RegisterFlagCompletionFunc("image-checksum", cobra.NoFileCompletions)
	return cmd
}

// completeDisk completes the storage class after SIZE, with the cluster's
// StorageClasses.
func completeDisk(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	classes := completion.StorageClasses(configFlags)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		size, class, ok := strings.Cut(toComplete, ",")
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names, directive := classes(cmd, args, class)
		for i := range names {
			names[i] = size + "," + names[i]
		}
		return names, directive
	}
}

// Complete takes the name and the namespace given with -n: like kubectl
// create, a printed VM names a namespace only when one was given.
func (o *Options) Complete(args []string, flags *pflag.FlagSet) error {
	o.Name = args[0]
	o.given = func(name string) bool { return flags.Changed(name) }
	if o.configFlags != nil && o.configFlags.Namespace != nil {
		o.namespace = *o.configFlags.Namespace
	}
	return nil
}

// Validate checks the flags, builds the VM and renders it as the operator
// would; every problem names its flag.
func (o *Options) Validate() error {
	if o.Output != "" && !slices.Contains(manifest.Formats, o.Output) {
		return fmt.Errorf("--output %q is not supported: use one of %s", o.Output, strings.Join(manifest.Formats, ", "))
	}
	if !slices.Contains(DryRuns, o.DryRun) {
		return fmt.Errorf("--dry-run %q is not supported: use one of %s", o.DryRun, strings.Join(DryRuns, ", "))
	}
	vm, err := o.build()
	if err != nil {
		return err
	}
	objs, err := render.Render(vm, render.Options{})
	var invalid *render.InvalidError
	if errors.As(err, &invalid) {
		msgs := make([]string, len(invalid.Errors))
		for i, fe := range invalid.Errors {
			msgs[i] = o.flagFor(fe.Field) + ": " + fe.Error()
		}
		return errors.New(strings.Join(msgs, "\n"))
	}
	if err != nil {
		return err
	}
	for _, w := range objs.Warnings {
		fmt.Fprintf(o.ErrOut, "Warning: %s\n", w)
	}
	o.vm = vm
	return nil
}

// flagFor names the flag (or argument) that set the field at path.
func (o *Options) flagFor(path string) string {
	var i int
	switch {
	case path == "metadata.name":
		return fmt.Sprintf("name %q", o.Name)
	case path == "metadata.namespace":
		return "--namespace"
	case path == "spec.vm.currentCpus":
		return "--cpus"
	case path == "spec.vm.maximumCpus" && o.given("max-cpus"):
		return "--max-cpus"
	case path == "spec.vm.maximumCpus":
		return "--cpus"
	case path == "spec.vm.currentRam":
		return "--ram"
	case path == "spec.vm.maximumRam" && o.given("max-ram"):
		return "--max-ram"
	case path == "spec.vm.maximumRam":
		return "--ram"
	case strings.HasPrefix(path, "spec.vm.networks"):
		return "--network"
	case strings.HasPrefix(path, "spec.cloudInit"):
		return "--cloud-init-user-data"
	case path == "spec.vm.disks":
		return "--disk/--cdrom"
	case strings.HasPrefix(path, "spec.vm.disks[0].source.checksum"):
		return "--image-checksum"
	case strings.HasPrefix(path, "spec.vm.disks[0].source"):
		return "--image"
	}
	if _, err := fmt.Sscanf(path, "spec.vm.disks[%d]", &i); err == nil {
		if i < len(o.Disks) {
			return fmt.Sprintf("--disk %q", o.Disks[i])
		}
		if i -= len(o.Disks); i < len(o.CDROMs) {
			return fmt.Sprintf("--cdrom %q", o.CDROMs[i])
		}
	}
	return fmt.Sprintf("vm %q", o.Name)
}

// Run prints the VM or creates it.
func (o *Options) Run(ctx context.Context) error {
	if o.DryRun != DryRunServer && (o.Output != "" || o.DryRun == DryRunClient) {
		if o.Output == "" {
			fmt.Fprintf(o.Out, "%s/%s created (dry run)\n", resourceName, o.Name)
			return nil
		}
		return manifest.WriteObjects(o.Out, o.Output, o.vm)
	}
	c, err := vmclient.New(o.configFlags)
	if err != nil {
		return err
	}
	o.vm.Namespace = c.Namespace
	content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.vm)
	if err != nil {
		return err
	}
	opts := metav1.CreateOptions{FieldManager: vmclient.FieldManager}
	if o.DryRun == DryRunServer {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	created, err := c.VMs(c.Namespace).Create(ctx, &unstructured.Unstructured{Object: content}, opts)
	switch {
	case apierrors.IsAlreadyExists(err):
		return fmt.Errorf("virtual machine %q already exists in namespace %q: nothing changed (change it with kubectl vm set, kubectl edit or kubectl apply)", o.Name, c.Namespace)
	case err != nil:
		return c.Explain(err)
	}
	if o.Output != "" {
		unstructured.RemoveNestedField(created.Object, "metadata", "managedFields")
		return manifest.WriteObjects(o.Out, o.Output, created.Object)
	}
	suffix := ""
	if o.DryRun == DryRunServer {
		suffix = " (server dry run)"
	}
	fmt.Fprintf(o.Out, "%s/%s created%s\n", resourceName, o.Name, suffix)
	return nil
}
