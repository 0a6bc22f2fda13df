// Command vm-runner runs one qemu VM from VM-Operator's runner config
// format: in a VM's pod, or stand-alone on any Linux host with qemu.
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

	"github.com/vmop/vmop/pkg/runner"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
)

func main() {
	os.Exit(run())
}

func run() int {
	flags := pflag.NewFlagSet("vm-runner", pflag.ContinueOnError)
	config := flags.StringP("config", "c", runnerconfig.ConfigDir+"/"+runnerconfig.ConfigFile, "the runner's config file")
	templateDirs := flags.StringSlice("template-dir", nil, "directories with qemu command templates that replace the embedded ones")
	qemu := flags.String("qemu", "qemu-system-x86_64", "the qemu program")
	swtpm := flags.String("swtpm", "swtpm", "the swtpm program")
	debug := flags.Bool("debug", false, "log debug messages (the qemu command, QMP traffic)")
	showVersion := flags.Bool("version", false, "print the version and exit")
	if err := flags.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return runner.ExitConfig
	}
	if *showVersion {
		fmt.Println("vm-runner", version.Get())
		return 0
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	r, err := runner.New(runner.Options{
		ConfigFile: *config, TemplateDirs: *templateDirs, Qemu: *qemu, Swtpm: *swtpm, Logger: log,
	})
	if err == nil {
		// SIGTERM (the pod is deleted) and ^C shut the guest down cleanly.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		log.Info("Starting", "version", version.Get(), "config", *config)
		err = r.Run(ctx)
	}
	var exit *runner.ExitError
	switch {
	case err == nil:
		return runner.ExitClean
	case errors.As(err, &exit):
		if exit.Code == runner.ExitConfig || exit.Code == runner.ExitFailed {
			log.Error("Cannot run the VM", "err", err, "exit", exit.Code)
		}
		return exit.Code
	default:
		log.Error("Cannot run the VM", "err", err)
		return runner.ExitFailed
	}
}
