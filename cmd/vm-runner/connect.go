package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// connect is vm-runner connect: it copies stdin to a TCP port of the
// guest of the runner that runs beside it (in the same pod), and what
// comes back to stdout. kubectl vm port-forward and ssh run it through
// pods/exec; ssh's ProxyCommand can run it on a stand-alone runner's host.
func connect(args []string) int {
	flags := pflag.NewFlagSet("vm-runner connect", pflag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: vm-runner connect --port PORT [-c config.yaml]\n\n"+
			"Copy stdin to TCP port PORT of the running VM's guest and what comes back to stdout.\n\nFlags:\n%s", flags.FlagUsages())
	}
	config := flags.StringP("config", "c", runnerconfig.ConfigDir+"/"+runnerconfig.ConfigFile, "the runner's config file")
	port := flags.Int("port", 0, "the guest's TCP port (1-65535)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return runnerconfig.ExitConfig
	}
	if flags.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "vm-runner connect: unexpected argument %q\n", flags.Arg(0))
		return runnerconfig.ExitConfig
	}
	if *port < 1 || *port > 65535 {
		fmt.Fprintf(os.Stderr, "vm-runner connect: --port %d: must be a number from 1 to 65535\n", *port)
		return runnerconfig.ExitConfig
	}
	// A signal ends the process as it is: the runner sees its request
	// end and gives up the forward.
	if err := runner.Connect(context.Background(), *config, *port, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "vm-runner connect:", err)
		return runnerconfig.ExitFailed
	}
	return 0
}
