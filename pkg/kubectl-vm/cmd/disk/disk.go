// Package disk is "kubectl vm disk": work on a stopped VM's disks. Its
// one subcommand, upload, puts a local image into a disk's claim through
// the API server alone: a short-lived pod of the VM's runner image holds
// the claim, and the image goes to "vm-runner disk receive" in that pod
// through pods/exec, which converts it onto the claim's block device
// (pkg/vm-runner/diskupload).
package disk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
)

// NewCmd makes the disk command, the parent of upload.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "disk",
		Short: "Work on a stopped VM's disks",
		Example: fmt.Sprintf(`  # Put a local qcow2 image into the system disk of the stopped VM web
  %[1]s disk upload web --disk system --image debian.qcow2`, name),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newUploadCmd(name, configFlags, streams))
	return cmd
}

// DefaultTimeout bounds the wait for the uploader pod to run.
const DefaultTimeout = 5 * time.Minute

// Options are the options of disk upload.
type Options struct {
	Name string
	// Disk is as given: a volumeClaimTemplate's name ("root") or the
	// disk's volume name ("root-disk").
	Disk    string
	Image   string
	Force   bool
	Timeout time.Duration

	size        int64 // of Image
	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

func newUploadCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "upload NAME --disk DISK --image FILE [--force] [--timeout DURATION]",
		Short: "Put a local image into a stopped VM's disk",
		Long: `Put a local disk image (qcow2 or raw, an ISO as raw; plain or compressed
with gzip, xz or zstd) into the claim of disk DISK of the stopped VM NAME,
through the API server alone. DISK is the disk's name in the VM
(spec.vm.disks[].volumeClaimTemplate.metadata.name, e.g. root) or its
volume's name (root-disk, or disk-N for a disk without a name).

The command makes a short-lived pod NAME-disk-upload of the VM's runner
image on the VM's node, with the disk's claim (created from the VM's
StatefulSet as the StatefulSet would create it, if the VM never ran),
streams the file to "vm-runner disk receive" in it through pods/exec, and
deletes the pod at the end, also when interrupted. The receiver stages the
image in the pod's scratch space, checks it with qemu-img and converts it
onto the claim's block device. The VM must be stopped while it does.

A disk that holds data, or was filled by an upload or an import before,
is not overwritten without --force. An upload that was cut off may be run
again without it. The VM's runner-data claim keeps a record of each
upload, so that the VM's own import (spec.vm.disks[].source) never writes
over an uploaded disk.

Needs the rights to get the VM (virtualmachines, statefulsets), to get,
create and delete pods and create pods/exec, and to get and create
persistentvolumeclaims in the VM's namespace.`,
		Example: fmt.Sprintf(`  # Fill the root disk of a new VM from a cloud image
  %[1]s create web --disk 20Gi
  %[1]s disk upload web --disk root --image debian-13-genericcloud-amd64.qcow2
  %[1]s start web

  # Replace what a disk holds
  %[1]s disk upload web --disk root-disk --image web-backup.raw.zst --force`, name),
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completion.VMName(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Complete(args)
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Disk, "disk", "", "the disk: its name in the VM (e.g. root) or its volume's (root-disk, disk-1)")
	f.StringVar(&o.Image, "image", "", "the image file: qcow2, raw or ISO, plain or compressed with gzip, xz or zstd")
	f.BoolVar(&o.Force, "force", false, "overwrite a disk that holds data or was filled before")
	f.DurationVar(&o.Timeout, "timeout", DefaultTimeout, "how long to wait for the uploader pod to run")
	_ = cmd.RegisterFlagCompletionFunc("disk", diskNames(configFlags))
	return cmd
}

// Complete takes the VM's name.
func (o *Options) Complete(args []string) {
	o.Name = args[0]
}

// Validate checks the flags and the image file; every problem names its
// flag, all of them at once.
func (o *Options) Validate() error {
	var errs []error
	if o.Disk == "" {
		errs = append(errs, errors.New("--disk is required: the disk to fill, e.g. root"))
	}
	switch fi, err := os.Stat(o.Image); {
	case o.Image == "":
		errs = append(errs, errors.New("--image is required: the image file to upload"))
	case err != nil:
		errs = append(errs, fmt.Errorf("--image: %w", err))
	case !fi.Mode().IsRegular():
		errs = append(errs, fmt.Errorf("--image %s: not a regular file", o.Image))
	case fi.Size() == 0:
		errs = append(errs, fmt.Errorf("--image %s: the file is empty", o.Image))
	default:
		o.size = fi.Size()
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be more than 0", o.Timeout))
	}
	return errors.Join(errs...)
}

// Run uploads the image; ^C or SIGTERM end the upload, and the pod is
// deleted all the same.
func (o *Options) Run(ctx context.Context) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The upload's error says how it ended; client-go's log of the
	// streams it was still copying when it was cut off ("Copying stdin
	// failed") only repeats that in worse words.
	utilruntime.ErrorHandlers = nil
	c, err := vmclient.New(o.configFlags)
	if err != nil {
		return err
	}
	o.client = c
	vm, err := c.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	target, err := o.findTarget(ctx, vm)
	if err != nil {
		return err
	}
	file, err := os.Open(o.Image)
	if err != nil {
		return fmt.Errorf("--image: %w", err)
	}
	defer file.Close()
	return o.upload(ctx, target, file, filepath.Base(o.Image))
}

// diskNames completes --disk with the disks of the VM given as argument.
func diskNames(configFlags *genericclioptions.ConfigFlags) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return completion.FromCluster(cmd.Context(), configFlags, toComplete, func(ctx context.Context, c *vmclient.Client) ([]string, error) {
			vm, err := c.Get(ctx, args[0])
			if err != nil || vm.StatefulSet == nil {
				return nil, err
			}
			return helperpod.Disks(vm.StatefulSet), nil
		})
	}
}
