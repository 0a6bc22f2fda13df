package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/containerdisk"
	"github.com/vmop/vmop/pkg/vm-runner/diskupload"
)

// disk is vm-runner disk: the uploader pod of kubectl vm disk upload runs
// "disk wait" as its process, and "disk receive" through pods/exec.
func disk(args []string) int {
	if len(args) > 0 {
		switch args[0] {
		case "wait":
			return diskWait(args[1:])
		case "receive":
			return diskReceive(args[1:])
		case "fetch":
			return diskFetch(args[1:])
		}
	}
	fmt.Fprintln(os.Stderr, "Usage: vm-runner disk wait | vm-runner disk fetch --disk DISK --to FILE --records DIR [--from DIR] | vm-runner disk receive --disk DISK --device PATH [--claim-size N] --records DIR --scratch DIR [--size N] [--name FILE] [--force] [--check]")
	return diskupload.ExitUsage
}

// diskWait keeps the uploader pod's container alive (the image has no
// shell, no sleep) until the pod is deleted.
func diskWait(args []string) int {
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "vm-runner disk wait: unexpected argument %q\n", args[0])
		return diskupload.ExitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	<-ctx.Done()
	return 0
}

// diskReceive fills a disk from stdin (see diskupload.Receive); progress
// goes to stdout, the reason of a failure to stderr.
func diskReceive(args []string) int {
	flags := pflag.NewFlagSet(diskupload.ReceiveName, pflag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: vm-runner disk receive --disk DISK --device PATH [--claim-size N] --records DIR --scratch DIR [--size N] [--name FILE] [--force] [--check]\n\n"+
			"Fill the disk at PATH with the image (qcow2 or raw, plain or compressed) read from stdin.\n\nFlags:\n%s", flags.FlagUsages())
	}
	var o diskupload.Options
	flags.StringVar(&o.Disk, "disk", "", "the disk's volume name, which its import record is named after")
	flags.StringVar(&o.Device, "device", "", "the disk's block device, or its image file with --claim-size")
	flags.Int64Var(&o.ClaimSize, "claim-size", 0, "the size in bytes of the Filesystem claim that holds the --device image file, which is made or grown to it")
	flags.StringVar(&o.RecordDir, "records", "", "the directory of the VM's import records")
	flags.StringVar(&o.ScratchDir, "scratch", "", "the directory the image is staged in")
	flags.Int64Var(&o.Size, "size", 0, "the image's size in bytes: exactly that many are read, and fewer fail")
	flags.StringVar(&o.Name, "name", "stdin", "the image's file name, for the record")
	flags.BoolVar(&o.Force, "force", false, "overwrite a disk that holds data or was filled before")
	check := flags.Bool("check", false, "only tell whether the disk may be filled (exit 0) or needs --force (exit 3); read nothing")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return diskupload.ExitUsage
	}
	var missing []error
	for _, f := range []struct{ flag, value string }{{"--disk", o.Disk}, {"--device", o.Device}, {"--records", o.RecordDir}, {"--scratch", o.ScratchDir}} {
		if f.value == "" {
			missing = append(missing, fmt.Errorf("%s is required", f.flag))
		}
	}
	if flags.NArg() > 0 {
		missing = append(missing, fmt.Errorf("unexpected argument %q", flags.Arg(0)))
	}
	if err := errors.Join(missing...); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", diskupload.ReceiveName, err)
		return diskupload.ExitUsage
	}
	var err error
	if *check {
		err = diskupload.Check(o)
	} else {
		o.Progress = os.Stdout
		// A signal stops the import; the record stays Importing, so that
		// the next upload may write the disk again.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		err = diskupload.Receive(ctx, os.Stdin, o)
	}
	if err == nil {
		return 0
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", diskupload.ReceiveName, err)
	if errors.As(err, new(*diskupload.NeedsForceError)) {
		return diskupload.ExitNeedsForce
	}
	return diskupload.ExitFailed
}

// diskFetch is the init container that runs in a containerDisk image: it
// copies the image's disk to where vm-runner import reads it (see
// pkg/vm-runner/containerdisk).
func diskFetch(args []string) int {
	flags := pflag.NewFlagSet("vm-runner disk fetch", pflag.ContinueOnError)
	var o containerdisk.Options
	flags.StringVar(&o.Dir, "from", runnerconfig.ContainerDiskDir, "the image's disk directory, whose one file is the disk")
	flags.StringVar(&o.To, "to", "", "where the copy goes")
	flags.StringVar(&o.RecordDir, "records", "", "the directory of the VM's import records")
	flags.StringVar(&o.Disk, "disk", "", "the disk's volume name, which its import record is named after")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return diskupload.ExitUsage
	}
	if o.To == "" || o.RecordDir == "" || o.Disk == "" || flags.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "vm-runner disk fetch: --disk, --to and --records are required, and nothing else")
		return diskupload.ExitUsage
	}
	o.Log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	if _, err := containerdisk.Fetch(o); err != nil {
		// The pod's termination message, and so the VM's status.
		fmt.Fprintf(os.Stderr, "disk %s: %v\n", o.Disk, err)
		return 1
	}
	return 0
}

// copySelf is the init container that gives the containerDisk images'
// init containers a vm-runner to run.
func copySelf(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "Usage: vm-runner copy-self DEST")
		return diskupload.ExitUsage
	}
	if err := containerdisk.CopySelf(args[0]); err != nil {
		fmt.Fprintf(os.Stderr, "vm-runner copy-self: %v\n", err)
		return 1
	}
	return 0
}
