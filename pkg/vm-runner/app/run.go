package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/configwatch"
	"github.com/vmop/vmop/pkg/vm-runner/reporter"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vmpod"
)

// run runs the VM (or checks it) and ends with the runner's exit code.
func (o *runOptions) run(stdout, stderr io.Writer) error {
	level := slog.LevelInfo
	if o.debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	r, err := runner.New(runner.Options{
		ConfigFile: o.config, TemplateDirs: o.templateDirs, Qemu: o.qemu, Swtpm: o.swtpm, Logger: log, SpiceAddress: o.spiceAddress,
	})
	if err == nil && o.check {
		return check(r, log, stdout, stderr)
	}
	if err == nil {
		if stop := report(r, log); stop != nil {
			defer stop()
		}
		// SIGTERM (the pod is deleted) and ^C shut the guest down cleanly.
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		followConfig(ctx, r, log)
		log.Info("Starting", "version", version.Get(), "config", o.config)
		err = r.Run(ctx)
	}
	if err == nil {
		return nil
	}
	code := exitCode(err)
	if code == runnerconfig.ExitConfig || code == runnerconfig.ExitFailed || code == runnerconfig.ExitQemuRefused {
		log.Error("Cannot run the VM", "err", err, "exit", code)
	}
	terminationMessage(err)
	return exit(code, nil)
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

// exitCode is the exit code an error of the runner ends vm-runner with:
// its *runner.ExitError's, else ExitFailed.
func exitCode(err error) int {
	if exitErr := (*runner.ExitError)(nil); errors.As(err, &exitErr) {
		return exitErr.Code
	}
	return runnerconfig.ExitFailed
}

// check runs runner.Check and says what it found.
func check(r *runner.Runner, log *slog.Logger, stdout, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := r.Check(ctx); err != nil {
		fmt.Fprintln(stderr, "vm-runner check:", err)
		return exit(exitCode(err), nil)
	}
	for _, p := range r.Status().CDProblems {
		log.Warn("CD drive stays empty", "drive", p.Drive, "file", p.Image, "err", p.Err)
	}
	fmt.Fprintln(stdout, "qemu accepts the VM", r.Name())
	return nil
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

// followConfig has the runner follow its ConfigMap through the API server
// when it runs in a pod whose account may read it, so that live changes
// come in a second, not at the kubelet's refresh of the volume.
func followConfig(ctx context.Context, r *runner.Runner, log *slog.Logger) {
	cfg, ns, err := reporter.InClusterConfig()
	if err != nil {
		return // stand-alone, or inCluster said why
	}
	w, err := configwatch.New(cfg, ns, r.Name(), vmpod.ConfigFile, log)
	if err != nil {
		log.Warn("Live changes come with the kubelet's refresh of the config volume (about a minute)", "err", err)
		return
	}
	updates := make(chan []byte, 1)
	r.FollowConfig(updates)
	go func() {
		err := w.Run(ctx, func(c []byte) {
			select { // only the newest counts
			case <-updates:
			default:
			}
			updates <- c
		})
		if err != nil {
			log.Info("Live changes come with the kubelet's refresh of the config volume (about a minute)", "err", err)
		}
	}()
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
