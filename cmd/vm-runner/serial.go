package main

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

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
)

const serialUsage = `Usage: vm-runner serial [-c config.yaml] [--follow | --attach [--who NAME]]

The serial console of the VM that the runner of config.yaml runs, through
the runner's socket: without flags the kept output (the last 128-256 KiB),
with --follow that and then new output as it comes, with --attach an
interactive session (one at a time; Ctrl-] leaves). kubectl vm console
--serial and kubectl vm logs run it in the VM's pod.

Flags:
`

// serial is "vm-runner serial". It exits 0, or 1 with the reason on
// stderr (an attach refused because someone is attached, too).
func serial(args []string) int {
	flags := pflag.NewFlagSet("vm-runner serial", pflag.ContinueOnError)
	flags.Usage = func() { fmt.Fprint(os.Stderr, serialUsage+flags.FlagUsages()) }
	config := flags.StringP("config", "c", runnerconfig.ConfigDir+"/"+runnerconfig.ConfigFile, "the runner's config file")
	follow := flags.BoolP("follow", "f", false, "print the kept output, then new output as it comes, read-only")
	attach := flags.Bool("attach", false, "attach interactively: stdin goes to the guest (raw, when a terminal); Ctrl-] leaves")
	who := flags.String("who", "", "with --attach: who attaches (user@host), shown to a client refused meanwhile")
	untilStdin := flags.Bool("until-stdin-closes", false, "with --follow: end when stdin ends (kubectl vm logs -f ends with its connection)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return 1
	}
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "vm-runner serial:", err)
		return 1
	}
	switch {
	case flags.NArg() > 0:
		return fail(fmt.Errorf("unexpected argument %q", flags.Arg(0)))
	case *follow && *attach:
		return fail(errors.New("--follow and --attach: choose one"))
	case *who != "" && !*attach:
		return fail(errors.New("--who: only with --attach"))
	case *untilStdin && !*follow:
		return fail(errors.New("--until-stdin-closes: only with --follow"))
	}
	c, err := runnerconfig.Load(*config)
	if err != nil {
		return fail(err)
	}
	mode := serialconsole.ModeHistory
	switch {
	case *follow:
		mode = serialconsole.ModeFollow
	case *attach:
		mode = serialconsole.ModeAttach
	}
	// SIGHUP: the session's terminal is gone (an exec whose client left).
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	if *who == "" {
		*who = fmt.Sprintf("vm-runner serial --attach (pid %d)", os.Getpid())
	}
	conn, err := serialconsole.Dial(ctx, filepath.Join(runner.RuntimeDir(c), serialconsole.ClientSocket), mode, *who)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	if mode != serialconsole.ModeAttach {
		return output(ctx, conn, *untilStdin)
	}
	return session(ctx, conn, c.VM.Name)
}

// output copies the guest's output to stdout until it ends (the runner
// stops, or ModeHistory's end), a signal comes, or, with untilStdin,
// stdin ends.
func output(ctx context.Context, conn net.Conn, untilStdin bool) int {
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
		fmt.Fprintln(os.Stderr, "vm-runner serial:", err)
		return 1
	}
	return 0
}

// session is an interactive session: stdin, raw when it is a terminal,
// to the guest until Ctrl-] or its end, the guest's output to stdout.
func session(ctx context.Context, conn net.Conn, vm string) int {
	fmt.Printf("%s of vm %s; Ctrl-] to leave\n", serialconsole.AttachedBanner, vm)
	if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
		// Every key for the guest: ^C, ^Z and the rest are the guest's.
		if old, err := term.MakeRaw(fd); err == nil {
			defer func() { _ = term.Restore(fd, old) }()
		}
	}
	inputDone, outputDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(inputDone)
		_, _ = io.Copy(conn, serialconsole.UntilEscape(os.Stdin))
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
	return 0
}
