package app

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// newConnectCmd is vm-runner connect: it copies stdin to a TCP port of
// the guest of the runner that runs beside it (in the same pod), and what
// comes back to stdout. kubectl vm port-forward and ssh run it through
// pods/exec; ssh's ProxyCommand can run it on a stand-alone runner's host.
func newConnectCmd() *cobra.Command {
	var (
		config string
		port   int
	)
	cmd := &cobra.Command{
		Use:   "connect --port PORT [-c config.yaml]",
		Short: "Copy stdin to a TCP port of the running guest, and what comes back to stdout",
		RunE: func(*cobra.Command, []string) error {
			if port < 1 || port > 65535 {
				return exit(runnerconfig.ExitConfig, fmt.Errorf("--port %d: must be a number from 1 to 65535", port))
			}
			// A signal ends the process as it is: the runner sees its
			// request end and gives up the forward.
			if err := runner.Connect(context.Background(), config, port, os.Stdin, os.Stdout); err != nil {
				return exit(runnerconfig.ExitFailed, err)
			}
			return nil
		},
	}
	addConfigFlag(cmd.Flags(), &config)
	cmd.Flags().IntVar(&port, "port", 0, "the guest's TCP port (1-65535)")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}
