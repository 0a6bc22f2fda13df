package app

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// newDisplayPasswordCmd is vm-runner display-password: kubectl vm console
// runs it in the VM's pod to set the display password at once.
func newDisplayPasswordCmd() *cobra.Command {
	var config, expiry string
	cmd := &cobra.Command{
		Use:   "display-password --expiry EXPIRY [-c config.yaml] < password",
		Short: "Set the SPICE display password of the running VM, read from stdin",
		Long: `Hands the first line of stdin to the runner beside it (in the same pod) as
the SPICE display's password, valid until EXPIRY: +SECONDS from now, now,
never, or seconds since the epoch. The runner sets it at once; it stays
until the next one, or until the display Secret changes.

Exit codes: 0 set, 1 not set (stderr says why), 2 a usage error, 3 the
display runs without a password (the VM opted out of the locked display).`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			password, err := readPassword(cmd.InOrStdin())
			if err != nil {
				return exit(runnerconfig.ExitPasswordFailed, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err = runner.SetDisplayPassword(ctx, config, password, expiry)
			switch {
			case errors.Is(err, runner.ErrDisplayWithoutPassword):
				return exit(runnerconfig.ExitDisplayWithoutPassword, err)
			case err != nil:
				return exit(runnerconfig.ExitPasswordFailed, err)
			}
			return nil
		},
	}
	addConfigFlag(cmd.Flags(), &config)
	cmd.Flags().StringVar(&expiry, "expiry", "", "when the password expires: +SECONDS, now, never, or seconds since the epoch")
	_ = cmd.MarkFlagRequired("expiry")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

// readPassword is the first line of in, at most 1 KiB.
func readPassword(in io.Reader) (string, error) {
	line, err := bufio.NewReader(io.LimitReader(in, 1<<10)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("reading the password from stdin: %w", err)
	}
	password := strings.TrimRight(line, "\r\n")
	if password == "" {
		return "", errors.New("no password on stdin")
	}
	return password, nil
}
