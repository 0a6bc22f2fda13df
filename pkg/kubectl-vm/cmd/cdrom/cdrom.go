// Package cdrom is "kubectl vm cdrom": insert a medium into a VM's CD
// drive or eject it, which the runner applies live.
package cdrom

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/completion"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// Options are the options of the cdrom command.
type Options struct {
	Name  string
	Drive int
	// Image is the medium to insert; empty ejects.
	Image string

	configFlags *genericclioptions.ConfigFlags
	client      *vmclient.Client
	genericiooptions.IOStreams
}

// NewCmd makes the cdrom command.
func NewCmd(name string, configFlags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
	o := &Options{configFlags: configFlags, IOStreams: streams}
	cmd := &cobra.Command{
		Use:   "cdrom NAME [--drive N] (insert IMAGE | eject)",
		Short: "Insert a CD image into a VM's drive, or eject it",
		Long: `Change the medium in a VM's CD drive (the drive-th disk with a cdrom,
counted from 0). IMAGE is a path in the image repository volume, an absolute
path or a URL, as in spec.vm.disks[].cdrom.image. A running guest sees the
change at once; one that holds the tray locked gets it when it unlocks it.
Without a VirtualMachine (GitOps mode) the change goes into the VM's
ConfigMap, and the next sync from Git undoes it; the pod's annotation
` + podsync.AnnotationConfigVersion + ` then makes the kubelet pass the change on at once
(without the right to patch pods it takes up to a minute or so).`,
		Example: fmt.Sprintf(`  # Insert an installer image
  %[1]s cdrom test-vm insert debian-12.iso

  # Eject the medium of the second drive
  %[1]s cdrom test-vm --drive 1 eject`, name),
		Args:              cobra.RangeArgs(2, 3),
		ValidArgsFunction: completion.VMName(configFlags),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(args); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().IntVar(&o.Drive, "drive", 0, "which CD drive, counted from 0")
	return cmd
}

// Complete reads the arguments and makes the client.
func (o *Options) Complete(args []string) error {
	o.Name = args[0]
	switch {
	case args[1] == "insert" && len(args) == 3:
		o.Image = args[2]
	case args[1] == "insert":
		return fmt.Errorf("insert needs an IMAGE")
	case args[1] == "eject" && len(args) == 2:
	case args[1] == "eject":
		return fmt.Errorf("eject takes no IMAGE, got %q", args[2])
	default:
		return fmt.Errorf("unknown action %q: insert IMAGE or eject", args[1])
	}
	var err error
	o.client, err = vmclient.New(o.configFlags)
	return err
}

// Validate checks the flags.
func (o *Options) Validate() error {
	if o.Drive < 0 {
		return fmt.Errorf("--drive must be 0 or more, not %d", o.Drive)
	}
	return nil
}

// Run changes the medium.
func (o *Options) Run(ctx context.Context) error {
	c := o.client
	vm, err := c.Get(ctx, o.Name)
	if err != nil {
		return err
	}
	if vm.Mode == vmclient.ModeOperator {
		err = o.patchVM(ctx, vm)
	} else {
		err = c.UpdateConfig(ctx, vm, o.ErrOut, func(cfg *runnerconfig.Config) error {
			n := 0
			for i := range cfg.VM.Drives {
				if d := &cfg.VM.Drives[i]; d.Type == runnerconfig.DriveCDROM {
					if n == o.Drive {
						d.File = render.CDROMFile(o.Image)
						return nil
					}
					n++
				}
			}
			return o.noDrive(n)
		})
		if err == nil {
			fmt.Fprintf(o.ErrOut, vmclient.GitOpsWarning+"\n", vm.Namespace, vm.Name)
		}
	}
	if err != nil {
		return err
	}
	if o.Image == "" {
		fmt.Fprintf(o.Out, "%s: drive %d ejected\n", o.Name, o.Drive)
	} else {
		fmt.Fprintf(o.Out, "%s: %s inserted into drive %d\n", o.Name, o.Image, o.Drive)
	}
	return nil
}

// patchVM replaces the image of the drive-th cdrom disk; the patch tests
// that the disk is still a cdrom, so that a concurrent edit of the disks
// fails instead of changing the wrong one.
func (o *Options) patchVM(ctx context.Context, vm *vmclient.VM) error {
	n := 0
	for i, d := range vm.VM.Spec.VM.Disks {
		if d.CDROM == nil {
			continue
		}
		if n == o.Drive {
			path := fmt.Sprintf("/spec/vm/disks/%d/cdrom", i)
			patch, err := json.Marshal([]map[string]any{
				{"op": "test", "path": path + "/image", "value": d.CDROM.Image},
				{"op": "replace", "path": path + "/image", "value": o.Image},
			})
			if err != nil {
				return err
			}
			_, err = o.client.VMs(vm.Namespace).Patch(ctx, vm.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: vmclient.FieldManager})
			return o.client.Explain(err)
		}
		n++
	}
	return o.noDrive(n)
}

func (o *Options) noDrive(drives int) error {
	return fmt.Errorf("%s has no CD drive %d (it has %d; --drive counts from 0)", o.Name, o.Drive, drives)
}
