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
	"time"

	"github.com/spf13/pflag"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/reporter"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

func main() {
	os.Exit(run())
}

func run() int {
	args := os.Args[1:]
	if len(args) > 0 {
		switch args[0] {
		case "serial":
			return serial(args[1:])
		case "connect":
			return connect(args[1:])
		case "import":
			return importDisks(args[1:])
		case "disk":
			return disk(args[1:])
		case "copy-self":
			return copySelf(args[1:])
		}
	}
	sub := ""
	if len(args) > 0 && (args[0] == "probe" || args[0] == "check") {
		sub, args = args[0], args[1:]
	}
	flags := pflag.NewFlagSet("vm-runner", pflag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: vm-runner [-c config.yaml] [flags]\n"+
			"       vm-runner serial [--follow | --attach] [-c config.yaml]   (the guest's serial console)\n"+
			"       vm-runner connect --port PORT [-c config.yaml]   (copy stdin/stdout to a TCP port of the running guest)\n"+
			"       vm-runner import [-c config.yaml]   (fill the disks that name a source image, once)\n"+
			"       vm-runner probe [-c config.yaml]   (exit 0 while the VM runs)\n"+
			"       vm-runner disk wait | disk receive --disk DISK --device PATH ...   (kubectl vm disk upload's pod: fill a disk from stdin)\n"+
			"       vm-runner copy-self DEST | disk fetch --disk DISK --to FILE --records DIR   (take a containerDisk image's disk out for the import)\n"+
			"       vm-runner check [-c config.yaml]   (start qemu paused with the config, apply it, quit: exit 0 when qemu accepts the VM)\n\nFlags:\n%s", flags.FlagUsages())
	}
	config := flags.StringP("config", "c", runnerconfig.ConfigDir+"/"+runnerconfig.ConfigFile, "the runner's config file")
	templateDirs := flags.StringSlice("template-dir", nil, "directories with qemu command templates that replace the embedded ones")
	qemu := flags.String("qemu", "qemu-system-x86_64", "the qemu program")
	swtpm := flags.String("swtpm", "swtpm", "the swtpm program")
	spiceAddress := flags.String("spice-address", "0.0.0.0", "the address the SPICE server listens on (127.0.0.1: this host only)")
	debug := flags.Bool("debug", false, "log debug messages (the qemu command, QMP traffic)")
	showVersion := flags.Bool("version", false, "print the version and exit")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return runnerconfig.ExitConfig
	}
	if *showVersion {
		fmt.Println("vm-runner", version.Get())
		return 0
	}
	if sub == "probe" {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := runner.Probe(ctx, *config); err != nil {
			fmt.Fprintln(os.Stderr, "not ready:", err)
			return 1
		}
		return 0
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	r, err := runner.New(runner.Options{
		ConfigFile: *config, TemplateDirs: *templateDirs, Qemu: *qemu, Swtpm: *swtpm, Logger: log, SpiceAddress: *spiceAddress,
	})
	if err == nil && sub == "check" {
		return check(r, log)
	}
	if err == nil {
		if stop := report(r, log); stop != nil {
			defer stop()
		}
		// SIGTERM (the pod is deleted) and ^C shut the guest down cleanly.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		log.Info("Starting", "version", version.Get(), "config", *config)
		err = r.Run(ctx)
	}
	if err == nil {
		return runnerconfig.ExitClean
	}
	code := runnerconfig.ExitFailed
	var exit *runner.ExitError
	if errors.As(err, &exit) {
		code = exit.Code
	}
	if code == runnerconfig.ExitConfig || code == runnerconfig.ExitFailed || code == runnerconfig.ExitQemuRefused {
		log.Error("Cannot run the VM", "err", err, "exit", code)
	}
	terminationMessage(err)
	return code
}

// terminationLog is where a container's last words go: the kubelet puts
// them into the pod's status, from which vm-operator and kubectl vm status
// report why the runner failed (without it they get the log's end).
const terminationLog = "/dev/termination-log"

// terminationMessage writes err there when the file exists (in a pod).
func terminationMessage(err error) {
	if _, serr := os.Stat(terminationLog); serr != nil {
		return
	}
	_ = os.WriteFile(terminationLog, []byte(err.Error()), 0o644)
}

// check runs runner.Check and says what it found.
func check(r *runner.Runner, log *slog.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := r.Check(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "vm-runner check:", err)
		var exit *runner.ExitError
		if errors.As(err, &exit) {
			return exit.Code
		}
		return runnerconfig.ExitFailed
	}
	for _, p := range r.Status().CDProblems {
		log.Warn("CD drive stays empty", "drive", p.Drive, "file", p.Image, "err", p.Err)
	}
	fmt.Println("qemu accepts the VM", r.Name())
	return 0
}

// report makes the runner write its VM's status and events when it runs in
// a pod, and returns what writes the final status and the last events; nil
// when stand-alone.
func report(r *runner.Runner, log *slog.Logger) func() {
	rep := inCluster(r.Name(), log)
	if rep == nil {
		return nil
	}
	r.UseReporter(rep)
	return func() { stopReporting(rep.Stop, "the final status and events", log) }
}

// inCluster is the reporter of the VM vm in a pod; nil stand-alone, or
// when it cannot be made (the log says why).
func inCluster(vm string, log *slog.Logger) *reporter.Reporter {
	rep, err := reporter.InCluster(vm, log)
	switch {
	case errors.Is(err, reporter.ErrNotInCluster):
		return nil
	case err != nil:
		log.Warn("Cannot report the VM's status", "err", err)
		return nil
	}
	return rep
}

// stopReporting ends a reporter with stop (its Stop or StopEvents), which
// writes what it still holds (what, for the log).
func stopReporting(stop func(context.Context) error, what string, log *slog.Logger) {
	// The signal context has ended by now: give the last writes their own.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stop(ctx); err != nil {
		log.Warn("Cannot write "+what, "err", err)
	}
}
