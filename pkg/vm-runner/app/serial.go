package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/runnerexec"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
)

// serialFailed is vm-runner serial's exit code for every failure, usage
// errors too: kubectl vm reads its reason from stderr.
const serialFailed = 1

// newSerialCmd is "vm-runner serial". It exits 0, or 1 with the reason on
// stderr (an attach refused because someone is attached, too).
func newSerialCmd() *cobra.Command {
	var (
		config, who                      string
		follow, attach, untilStdinCloses bool
	)
	cmd := &cobra.Command{
		Use:   "serial [-c config.yaml] [--follow | --attach [--who NAME]]",
		Short: "The guest's serial console",
		Long: `The serial console of the VM that the runner of config.yaml runs, through
the runner's socket: without flags the kept output (the last 128-256 KiB),
with --follow that and then new output as it comes, with --attach an
interactive session (one at a time; Ctrl-] leaves). kubectl vm console
--serial and kubectl vm logs run it in the VM's pod.`,
		RunE: func(*cobra.Command, []string) error {
			switch {
			case follow && attach:
				return usage(serialFailed, errors.New("--follow and --attach: choose one"))
			case who != "" && !attach:
				return usage(serialFailed, errors.New("--who: only with --attach"))
			case untilStdinCloses && !follow:
				return usage(serialFailed, errors.New("--until-stdin-closes: only with --follow"))
			}
			mode := runnerexec.ModeHistory
			switch {
			case follow:
				mode = runnerexec.ModeFollow
			case attach:
				mode = runnerexec.ModeAttach
			}
			return serial(config, mode, who, untilStdinCloses)
		},
	}
	f := cmd.Flags()
	addConfigFlag(f, &config)
	f.BoolVarP(&follow, "follow", "f", false, "print the kept output, then new output as it comes, read-only")
	f.BoolVar(&attach, "attach", false, "attach interactively: stdin goes to the guest (raw, when a terminal); Ctrl-] leaves")
	f.StringVar(&who, "who", "", "with --attach: who attaches (user@host), shown to a client refused meanwhile")
	f.BoolVar(&untilStdinCloses, "until-stdin-closes", false, "with --follow: end when stdin ends (kubectl vm logs -f ends with its connection)")
	usageCode(cmd, serialFailed)
	return cmd
}

// serial reaches the serial console of config's VM in mode.
func serial(config string, mode runnerexec.Mode, who string, untilStdin bool) error {
	c, err := runnerconfig.Load(config)
	if err != nil {
		return exit(serialFailed, err)
	}
	// SIGHUP: the session's terminal is gone (an exec whose client left).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	if who == "" {
		who = fmt.Sprintf("vm-runner serial --attach (pid %d)", os.Getpid())
	}
	conn, err := serialconsole.Dial(ctx, filepath.Join(runner.RuntimeDir(c), serialconsole.ClientSocket), mode, who)
	if err != nil {
		return exit(serialFailed, err)
	}
	defer conn.Close()
	if mode != runnerexec.ModeAttach {
		return output(ctx, conn, untilStdin)
	}
	return session(ctx, conn, c.VM.Name)
}

// output copies the guest's output to stdout until it ends (the runner
// stops, or ModeHistory's end), a signal comes, or, with untilStdin,
// stdin ends.
func output(ctx context.Context, conn net.Conn, untilStdin bool) error {
	if untilStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			conn.Close()
		}()
	}
	go func() {
		<-ctx.Done()
		conn.Close()
	}()
	if _, err := io.Copy(os.Stdout, conn); err != nil && !errors.Is(err, net.ErrClosed) {
		return exit(serialFailed, err)
	}
	return nil
}

// session is an interactive session: stdin, raw when it is a terminal,
// to the guest until Ctrl-] or its end, the guest's output to stdout.
func session(ctx context.Context, conn net.Conn, vm string) error {
	fmt.Printf("%s of vm %s; Ctrl-] to leave\n", runnerexec.AttachedBanner, vm)
	if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
		// Every key for the guest: ^C, ^Z and the rest are the guest's.
		if old, err := term.MakeRaw(fd); err == nil {
			defer func() { _ = term.Restore(fd, old) }()
		}
	}
	inputDone, outputDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(inputDone)
		_, _ = io.Copy(conn, runnerexec.UntilEscape(os.Stdin))
	}()
	go func() {
		defer close(outputDone)
		_, _ = io.Copy(os.Stdout, conn)
	}()
	select {
	case <-inputDone: // Ctrl-] or the end of stdin: the user left
	case <-outputDone:
		fmt.Fprint(os.Stderr, "\r\nvm-runner serial: the runner closed the serial console (the VM stopped)\r\n")
	case <-ctx.Done():
	}
	return nil
}
