package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// newFreezeCmd is vm-runner freeze, and newThawCmd vm-runner thaw: a
// snapshot, or a backup tool's hooks (Velero's), run them in the VM's pod
// around the copy of its disks.
func newFreezeCmd() *cobra.Command {
	var config string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "freeze [--timeout 1m] [-c config.yaml]",
		Short: "Freeze the guest's file systems for a consistent snapshot, for at most --timeout",
		Long: `Asks the runner beside it (in the same pod) to freeze the guest's file
systems through the guest agent: what the guest wrote is on its disks, and
it writes nothing more until vm-runner thaw, or until --timeout (at most
10m) runs out and the runner thaws them itself, so that a snapshot tool
that dies leaves no guest frozen.

Exit codes: 0 frozen, 1 not frozen (stderr says why), 2 a usage error, 3
no guest agent answers: the guest cannot be frozen, and a snapshot now is
crash-consistent.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if timeout <= 0 || timeout > runner.MaxFreezeTimeout {
				return usage(runnerconfig.ExitConfig, fmt.Errorf("--timeout %s: must be above 0 and at most %s", timeout, runner.MaxFreezeTimeout))
			}
			res, err := freeze(config, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Froze the guest's %d file systems; thawed at the latest in %s\n", res.FileSystems, timeout)
			return nil
		},
	}
	addConfigFlag(cmd.Flags(), &config)
	cmd.Flags().DurationVar(&timeout, "timeout", runner.DefaultFreezeTimeout, "thaw the file systems after this long if nobody has")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newThawCmd() *cobra.Command {
	var config string
	cmd := &cobra.Command{
		Use:   "thaw [-c config.yaml]",
		Short: "Thaw the guest's file systems after vm-runner freeze",
		Long: `Asks the runner beside it (in the same pod) to thaw the guest's file
systems, frozen by vm-runner freeze; a guest that is not frozen stays as
it is.

Exit codes: 0 thawed (or not frozen), 1 not thawed (stderr says why), 2 a
usage error, 3 no guest agent answers.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := freeze(config, 0)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Thawed the guest's %d file systems\n", res.FileSystems)
			return nil
		},
	}
	addConfigFlag(cmd.Flags(), &config)
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

// freeze asks the runner to freeze (timeout > 0) or thaw, with the exit
// code of the outcome.
func freeze(config string, timeout time.Duration) (runner.FreezeResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := runner.Freeze(ctx, config, timeout)
	switch {
	case errors.Is(err, runner.ErrNoAgent):
		return res, exit(runnerconfig.ExitNoGuestAgent, err)
	case err != nil:
		return res, exit(runnerconfig.ExitFreezeFailed, err)
	}
	return res, nil
}
