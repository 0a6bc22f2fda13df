// Package app is vm-runner's command line (cmd/vm-runner): a cobra
// command tree whose commands end with the exit codes that the pods, the
// operator and kubectl vm read (runnerconfig.Exit*, diskupload.Exit*).
package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vmpod"
)

// exitError ends vm-runner with code. Execute prints err, when set, after
// the command's name, and for a usage error a pointer to --help.
type exitError struct {
	code  int
	err   error
	usage bool
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exit ends the command with code, printing err (nil: nothing).
func exit(code int, err error) error { return &exitError{code: code, err: err} }

// usage is a usage error that ends the command with code.
func usage(code int, err error) error { return &exitError{code: code, err: err, usage: true} }

// commandGroup is a command that only holds commands: without a known
// one, a usage error with code that lists them, not cobra's help.
func commandGroup(use, short string, code int, commands ...*cobra.Command) *cobra.Command {
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.Name()
	}
	list := strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usage(code, errors.New("a command is required: "+list))
			}
			return usage(code, fmt.Errorf("unknown command %q", args[0]))
		},
		RunE:                  func(*cobra.Command, []string) error { return nil },
		DisableFlagsInUseLine: true,
	}
	usageCode(cmd, code)
	cmd.AddCommand(commands...)
	return cmd
}

// usageCode makes flag and argument errors of cmd end with code: each
// path keeps the exit code its callers know.
func usageCode(cmd *cobra.Command, code int) {
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(code, err) })
	if cmd.Args == nil {
		cmd.Args = noArgs(code)
	}
}

// noArgs refuses positional arguments with code.
func noArgs(code int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usage(code, fmt.Errorf("unexpected argument %q", args[0]))
		}
		return nil
	}
}

// Execute runs vm-runner with args (without the program's name) and
// returns its exit code; help goes to stdout, errors to stderr.
func Execute(args []string, stdout, stderr io.Writer) int {
	root := NewCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	var e *exitError
	if !errors.As(err, &e) {
		// cobra's own: an unknown command or flag of a command that
		// sets no code.
		e = &exitError{code: runnerconfig.ExitConfig, err: err, usage: true}
	}
	if e.err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), e.err)
	}
	if e.usage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return e.code
}

// NewCmd is vm-runner's command tree.
func NewCmd() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "vm-runner [-c config.yaml]",
		Short: "Run one qemu VM from VM-Operator's runner config format",
		Long: `vm-runner runs one qemu VM from VM-Operator's runner config format: in a
VM's pod, or stand-alone on any Linux host with qemu. Without a command it
runs the VM of the config file until the guest shuts down; SIGTERM and ^C
shut the guest down cleanly.

Exit codes: 0 the guest shut down, 1 the VM could not start, 2 the config
is invalid (or a usage error), 3 the guest did not shut down in time, 4
qemu ended without a shutdown, 5 qemu refused to start, 6 no network, 7 a
disk import failed.`,
		Version:       version.Get(),
		SilenceUsage:  true,
		SilenceErrors: true,
		// Unknown commands are usage errors, not arguments of the run.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				msg := fmt.Sprintf("unknown command %q", args[0])
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					msg += fmt.Sprintf(" (did you mean %q?)", s[0])
				}
				return usage(runnerconfig.ExitConfig, errors.New(msg))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.OutOrStdout(), cmd.ErrOrStderr()) },
	}
	cmd.SuggestionsMinimumDistance = 2
	cmd.CompletionOptions.DisableDefaultCmd = true
	o.addFlags(cmd.Flags())
	usageCode(cmd, runnerconfig.ExitConfig)
	cmd.AddCommand(newProbeCmd(), newCheckCmd(), newSerialCmd(), newConnectCmd(), newDisplayPasswordCmd(), newFreezeCmd(), newThawCmd(), newSnapshotCmd(), newImportCmd(), newDiskCmd(), newCopySelfCmd())
	return cmd
}

// runOptions are the flags of the run, probe and check.
type runOptions struct {
	config, qemu, swtpm, spiceAddress string
	templateDirs                      []string
	debug                             bool
	// check: only check that qemu accepts the VM (vm-runner check).
	check bool
}

func (o *runOptions) addFlags(f *pflag.FlagSet) {
	addConfigFlag(f, &o.config)
	f.StringSliceVar(&o.templateDirs, "template-dir", nil, "directories with qemu command templates that replace the embedded ones")
	f.StringVar(&o.qemu, "qemu", "qemu-system-x86_64", "the qemu program")
	f.StringVar(&o.swtpm, "swtpm", "swtpm", "the swtpm program")
	f.StringVar(&o.spiceAddress, "spice-address", "0.0.0.0", "the address the SPICE server listens on (127.0.0.1: this host only)")
	f.BoolVar(&o.debug, "debug", false, "log debug messages (the qemu command, QMP traffic)")
}

// addConfigFlag is -c, the runner's config file, of every command that
// reads it.
func addConfigFlag(f *pflag.FlagSet, config *string) {
	f.StringVarP(config, "config", "c", vmpod.ConfigDir+"/"+vmpod.ConfigFile, "the runner's config file")
}

func newProbeCmd() *cobra.Command {
	o := &runOptions{}
	var live bool
	cmd := &cobra.Command{
		Use:   "probe [-c config.yaml] [--live]",
		Short: "Exit 0 while the VM runs (the runner container's readiness probe), or with --live while the runner answers (its liveness probe)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := runner.Probe(ctx, o.config, live); err != nil {
				what := "not ready:"
				if live {
					what = "not alive:"
				}
				fmt.Fprintln(cmd.ErrOrStderr(), what, err)
				return exit(runnerconfig.ExitFailed, nil)
			}
			return nil
		},
	}
	o.addFlags(cmd.Flags())
	cmd.Flags().BoolVar(&live, "live", false, "ask whether the runner answers and its loop turns, not whether the VM runs")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}

func newCheckCmd() *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "check [-c config.yaml]",
		Short: "Start qemu paused with the config, apply it, quit: exit 0 when qemu accepts the VM",
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.check = true
			return o.run(cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.addFlags(cmd.Flags())
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}
