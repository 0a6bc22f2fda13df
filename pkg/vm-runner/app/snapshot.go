package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/snapshotpush"
	"github.com/vmop/vmop/pkg/vm-runner/machineid"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runnerdata"
	"github.com/vmop/vmop/pkg/vm-runner/snapshot"
	"github.com/vmop/vmop/pkg/vmpod"
)

// newSnapshotCmd is vm-runner snapshot: what kubectl vm snapshot and
// restore run through pods/exec, in the VM's pod (disks, push) and in
// the snapshot pod (serve, copy, data, restore-data, machine-id). Each prints JSON
// or its result on stdout and why it failed on stderr.
func newSnapshotCmd() *cobra.Command {
	return commandGroup("snapshot", "Copy a VM's disks and runner data into a snapshot, and back (kubectl vm snapshot, restore)",
		runnerconfig.ExitConfig, newSnapshotDisksCmd(), newSnapshotPushCmd(), newSnapshotServeCmd(), newSnapshotCopyCmd(), newSnapshotDataCmd(), newSnapshotRestoreDataCmd(), newSnapshotMachineIDCmd())
}

func newSnapshotDisksCmd() *cobra.Command {
	var config string
	cmd := &cobra.Command{
		Use:   "disks [-c config.yaml]",
		Short: "Print the running VM's disks and their sizes (JSON)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			disks, err := runner.Disks(ctx, config)
			if err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(disks)
		},
	}
	addConfigFlag(cmd.Flags(), &config)
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newSnapshotPushCmd() *cobra.Command {
	var (
		config, host, name string
		exports            []string
	)
	cmd := &cobra.Command{
		Use:   "push --snapshot NAME --host ADDRESS --export DISK=EXPORT:PORT... [-c config.yaml] < key",
		Short: "Copy the running VM's disks to a snapshot pod's NBD exports (JSON result)",
		Long: `Asks the runner beside it to copy the VM's disks, as they are at one
instant, to the snapshot pod's NBD exports (vm-runner snapshot serve) while
the guest runs, freezing the guest's file systems through its agent while
the copies begin. The TLS key (IDENTITY:HEXKEY) is read from stdin. Prints
the result as JSON: whether the copy is consistent, how long the guest was
frozen, and the runner data's archive.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p := snapshotpush.PushRequest{Snapshot: name, Host: host}
			for _, e := range exports {
				disk, rest, ok := strings.Cut(e, "=")
				export, port, ok2 := strings.Cut(rest, ":")
				n, err := strconv.Atoi(port)
				if !ok || !ok2 || err != nil || disk == "" || export == "" {
					return usage(runnerconfig.ExitConfig, fmt.Errorf("--export %q: want DISK=EXPORT:PORT", e))
				}
				p.Exports = append(p.Exports, snapshotpush.PushExport{Disk: disk, Export: export, Port: n})
			}
			if host == "" || len(p.Exports) == 0 {
				return usage(runnerconfig.ExitConfig, errors.New("--host and --export are required"))
			}
			psk, err := snapshotpush.ReadPSK(cmd.InOrStdin())
			if err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			p.PSK = psk.String()
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			res, err := runner.Push(ctx, config, p)
			if err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	addConfigFlag(cmd.Flags(), &config)
	f := cmd.Flags()
	f.StringVar(&name, "snapshot", "", "the snapshot's name, for the VM's events")
	f.StringVar(&host, "host", "", "the snapshot pod's address")
	f.StringSliceVar(&exports, "export", nil, "where a disk goes: its volume name, the export's name and its port")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newSnapshotServeCmd() *cobra.Command {
	var exports []string
	cmd := &cobra.Command{
		Use:   "serve --export NAME=PATH:SIZE... < key",
		Short: "Serve the snapshot's disks over NBD with TLS until stdin ends",
		Long: `Serves each --export (the first SIZE bytes of the disk at PATH, a block
device or an image file, which is made) over NBD with TLS on the key read
from the first line of stdin, on ports 10809 and up, one writer each, until
stdin ends; then stops and syncs them.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var ex []snapshot.Export
			for i, s := range exports {
				e, err := snapshot.ParseExport(s)
				if err != nil {
					return usage(runnerconfig.ExitConfig, err)
				}
				e.Port = snapshotpush.FirstPort + i
				ex = append(ex, e)
			}
			if len(ex) == 0 {
				return usage(runnerconfig.ExitConfig, errors.New("--export is required"))
			}
			if err := nodeagent.WaitPrepared(context.Background()); err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			in := cmd.InOrStdin()
			psk, err := snapshotpush.ReadPSK(in)
			if err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			stop := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, in)
				close(stop)
			}()
			ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer cancel()
			srv := snapshot.Server{Exports: ex, PSK: psk, Log: cmd.OutOrStdout()}
			if err := srv.Serve(ctx, stop); err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&exports, "export", nil, "a disk to serve: the export's name, the path and the size in bytes")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newSnapshotCopyCmd() *cobra.Command {
	var (
		from, to string
		size     int64
	)
	cmd := &cobra.Command{
		Use:   "copy --from PATH --to PATH [--size BYTES]",
		Short: "Copy a disk (its first SIZE bytes) onto another, sync it, and print the bytes copied",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" || size < 0 {
				return usage(runnerconfig.ExitConfig, errors.New("--from and --to are required, and --size is not negative"))
			}
			if err := nodeagent.WaitPrepared(context.Background()); err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			n, err := snapshot.Copy(ctx, "", from, to, size)
			if err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), n)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the disk to copy: a block device or an image file")
	f.StringVar(&to, "to", "", "where the copy goes: a block device or an image file, which is made")
	f.Int64Var(&size, "size", 0, "how many bytes to copy: the disk's size; 0 for all of --from")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newSnapshotDataCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "data [--dir DIR]",
		Short: "Write the archive of the VM's runner data to stdout",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var b bytes.Buffer
			if err := runnerdata.Archive(dir, &b); err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			_, err := cmd.OutOrStdout().Write(b.Bytes())
			return err
		},
	}
	cmd.Flags().StringVar(&dir, "dir", vmpod.DataDir, "the runner data's directory")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newSnapshotRestoreDataCmd() *cobra.Command {
	var (
		dir   string
		clone bool
	)
	cmd := &cobra.Command{
		Use:   "restore-data [--dir DIR] [--clone] < archive",
		Short: "Make the VM's runner data the archive's, read from stdin",
		RunE: func(cmd *cobra.Command, _ []string) error {
			var drop []string
			if clone {
				drop = append(drop, runnerdata.UUIDFile)
			}
			if err := runnerdata.Extract(cmd.InOrStdin(), dir, drop...); err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", vmpod.DataDir, "the runner data's directory")
	cmd.Flags().BoolVar(&clone, "clone", false, "for a clone: leave out the machine's uuid, so that the clone gets its own")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newSnapshotMachineIDCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "machine-id DISK",
		Short: "Give the Linux guest on a clone's disk a new machine id; print the files changed",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// A Block disk is the runner's to open once the node agent
			// prepared the pod; this may be the first command in it.
			if err := nodeagent.WaitPrepared(context.Background()); err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			changed, err := machineid.Renew(args[0])
			for _, c := range changed {
				fmt.Fprintln(cmd.OutOrStdout(), c)
			}
			if err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			return nil
		},
	}
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}
