package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/vm-runner/containerdisk"
	"github.com/vmop/vmop/pkg/vm-runner/diskupload"
	"github.com/vmop/vmop/pkg/vmpod"
)

// newDiskCmd is vm-runner disk: the uploader pod of kubectl vm disk upload
// runs "disk wait" as its process, and "disk receive" through pods/exec;
// a containerDisk image's init container runs "disk fetch".
func newDiskCmd() *cobra.Command {
	return commandGroup("disk", "Fill a disk from stdin or from a containerDisk image (kubectl vm disk upload, containerDisk)",
		diskupload.ExitUsage, newDiskWaitCmd(), newDiskReceiveCmd(), newDiskFetchCmd())
}

// newDiskWaitCmd keeps the uploader pod's container alive (the image has
// no shell, no sleep) until the pod is deleted.
func newDiskWaitCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wait",
		Short: "Wait for SIGTERM (the uploader pod's process)",
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			// The node agent gives the unprivileged container its disk,
			// which the receiver, exec'd later, writes.
			if _, err := nodeagent.AskIfServed(ctx, nodeagent.Request{}); err != nil {
				terminationMessage(err)
				return err
			}
			<-ctx.Done()
			return nil
		},
	}
	usageCode(cmd, diskupload.ExitUsage)
	return cmd
}

// newDiskReceiveCmd fills a disk from stdin (see diskupload.Receive);
// progress goes to stdout, the reason of a failure to stderr.
func newDiskReceiveCmd() *cobra.Command {
	var (
		o     diskupload.Options
		check bool
	)
	cmd := &cobra.Command{
		Use:   "receive --disk DISK --device PATH [--claim-size N] --records DIR --scratch DIR [--size N] [--name FILE] [--force] [--check]",
		Short: "Fill the disk at PATH with the image (qcow2 or raw, plain or compressed) read from stdin",
		RunE: func(*cobra.Command, []string) error {
			var missing []error
			for _, f := range []struct{ flag, value string }{{"--disk", o.Disk}, {"--device", o.Device}, {"--records", o.RecordDir}, {"--scratch", o.ScratchDir}} {
				if f.value == "" {
					missing = append(missing, fmt.Errorf("%s is required", f.flag))
				}
			}
			if err := errors.Join(missing...); err != nil {
				return usage(diskupload.ExitUsage, err)
			}
			// The uploader pod's process (disk wait) has the node agent give
			// the container its disk; this one may come first.
			if err := nodeagent.WaitPrepared(context.Background()); err != nil {
				return exit(diskupload.ExitFailed, err)
			}
			var err error
			if check {
				err = diskupload.Check(o)
			} else {
				o.Progress = os.Stdout
				// A signal stops the import; the record stays Importing,
				// so that the next upload may write the disk again.
				ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
				defer stop()
				err = diskupload.Receive(ctx, os.Stdin, o)
			}
			switch {
			case err == nil:
				return nil
			case errors.As(err, new(*diskupload.NeedsForceError)):
				return exit(diskupload.ExitNeedsForce, err)
			}
			return exit(diskupload.ExitFailed, err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Disk, "disk", "", "the disk's volume name, which its import record is named after")
	f.StringVar(&o.Device, "device", "", "the disk's block device, or its image file with --claim-size")
	f.Int64Var(&o.ClaimSize, "claim-size", 0, "the size in bytes of the Filesystem claim that holds the --device image file, which is made or grown to it")
	f.StringVar(&o.RecordDir, "records", "", "the directory of the VM's import records")
	f.StringVar(&o.ScratchDir, "scratch", "", "the directory the image is staged in")
	f.Int64Var(&o.Size, "size", 0, "the image's size in bytes: exactly that many are read, and fewer fail")
	f.StringVar(&o.Name, "name", "stdin", "the image's file name, for the record")
	f.BoolVar(&o.Force, "force", false, "overwrite a disk that holds data or was filled before")
	f.BoolVar(&check, "check", false, "only tell whether the disk may be filled (exit 0) or needs --force (exit 3); read nothing")
	usageCode(cmd, diskupload.ExitUsage)
	return cmd
}

// newDiskFetchCmd is the init container that runs in a containerDisk
// image: it copies the image's disk to where vm-runner import reads it
// (see pkg/vm-runner/containerdisk).
func newDiskFetchCmd() *cobra.Command {
	var o containerdisk.Options
	cmd := &cobra.Command{
		Use:   "fetch --disk DISK --to FILE --records DIR [--from DIR]",
		Short: "Copy a containerDisk image's disk out for the import",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.To == "" || o.RecordDir == "" || o.Disk == "" {
				return usage(diskupload.ExitUsage, errors.New("--disk, --to and --records are required"))
			}
			o.Log = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			if _, err := containerdisk.Fetch(o); err != nil {
				// The pod's termination message, and so the VM's status.
				fmt.Fprintf(cmd.ErrOrStderr(), "disk %s: %v\n", o.Disk, err)
				return exit(1, nil)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Dir, "from", vmpod.ContainerDiskDir, "the image's disk directory, whose one file is the disk")
	f.StringVar(&o.To, "to", "", "where the copy goes")
	f.StringVar(&o.RecordDir, "records", "", "the directory of the VM's import records")
	f.StringVar(&o.Disk, "disk", "", "the disk's volume name, which its import record is named after")
	usageCode(cmd, diskupload.ExitUsage)
	return cmd
}

// newCopySelfCmd is the init container that gives the containerDisk
// images' init containers a vm-runner to run.
func newCopySelfCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "copy-self DEST",
		Short: "Copy this program to DEST (for a containerDisk image's init container)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usage(diskupload.ExitUsage, errors.New("one argument, DEST, is required"))
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			if err := containerdisk.CopySelf(args[0]); err != nil {
				return exit(1, err)
			}
			return nil
		},
	}
	usageCode(cmd, diskupload.ExitUsage)
	return cmd
}
