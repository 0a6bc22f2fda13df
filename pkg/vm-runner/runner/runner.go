// Package runner is vm-runner's logic: it starts qemu (and swtpm) for one
// VM from the runner's config file, drives it over QMP, applies what can
// change while the VM runs, and shuts the guest down cleanly on SIGTERM.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/vmop/vmop/pkg/kvm"
	"github.com/vmop/vmop/pkg/vmpod"

	"github.com/vmop/vmop/pkg/cloudinit"
	"github.com/vmop/vmop/pkg/podnet"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
)

// ExitError is an error with the exit code (package runnerexit) it stands
// for.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// Options configure a Runner.
type Options struct {
	// ConfigFile is the runner's config (the ConfigMap's config.yaml).
	ConfigFile string
	// TemplateDirs may hold templates that replace the embedded ones.
	TemplateDirs []string
	// TemplateHelper is vm-runner-template (ExpandTemplate); empty: the
	// one beside the runner, else on PATH.
	TemplateHelper string
	// Qemu and Swtpm are the programs; found on PATH when empty.
	Qemu, Swtpm string
	Logger      *slog.Logger
	// Reporter receives the VM's status; nil for none.
	Reporter Reporter
	// QemuOutput receives qemu's and swtpm's own output; nil for stderr.
	QemuOutput io.Writer
	// SpiceAddress is where the SPICE server listens; empty for all
	// addresses, as a pod needs.
	SpiceAddress string
	// ConsoleOutput receives the guest's serial output when the config
	// asks for it (serialConsole.podLog); nil for stdout, the pod log.
	ConsoleOutput io.Writer
}

// consolePrefix starts the guest's lines in the pod log.
const consolePrefix = "[serial] "

// Runner runs one VM.
type Runner struct {
	opts      Options
	log       *slog.Logger
	configDir string
	config    *runnerconfig.Config // the config in effect
	// configUpdates brings the config as the API server has it
	// (FollowConfig); apiConfig holds what came, loop-only.
	configUpdates <-chan []byte
	apiConfig     apiConfig
	dataDir       string
	runtimeDir    string
	machine       *Machine

	qemu, swtpm *process
	console     *serialconsole.Console
	mon         *qmp.Monitor
	status      Status
	live        *liveState
	guest       *guestWatch
	// ready is read by the probe server while the loop runs.
	ready atomic.Bool
	// guestInfo is status.Guest for the control server's connections.
	guestInfo atomic.Pointer[guestagent.Info]
	forwards  forwards
	// passwords carries display passwords handed over through the pod
	// from the probe server to the loop.
	passwords chan passwordRequest
	// freezes carries freezes and thaws of the guest's file systems
	// (vm-runner freeze, thaw); freeze is the one that holds, loop-only.
	freezes chan freezeRequest
	freeze  *frozen
	// pushes start copies of the disks into snapshots (vm-runner
	// snapshot push), one at a time (pushing); diskQueries ask for the
	// disks' sizes.
	pushes      chan pushRequest
	pushing     atomic.Bool
	diskQueries chan chan diskAnswer
	// podNet is the guest's side of the pod's network, podMAC its NIC's
	// address; nil without one.
	podNet *podnet.Network
	podMAC string
	// diskRetry, diskSettle, qmpPing, loopBeat, loopStale and bootWait
	// are the constants' values but in tests.
	diskRetry, diskSettle, qmpPing, loopBeat, loopStale, bootWait time.Duration
	// beat is when the loop last turned (Unix nanoseconds), for the
	// liveness probe; 0 before the loop runs.
	beat atomic.Int64
	// hung says why watchQemu killed qemu; nil unless it did.
	hung atomic.Pointer[string]
	// paused says why qemu holds the guest paused, for the readiness
	// probe's answer; nil while it runs.
	paused atomic.Pointer[string]
}

// New loads the config. An invalid config is an *ExitError with
// runnerconfig.ExitConfig: nothing has been started.
func New(opts Options) (*Runner, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Reporter == nil {
		opts.Reporter = nopReporter{}
	}
	if opts.QemuOutput == nil {
		opts.QemuOutput = os.Stderr
	}
	if opts.ConsoleOutput == nil {
		opts.ConsoleOutput = os.Stdout
	}
	if opts.Qemu == "" {
		opts.Qemu = "qemu-system-x86_64"
	}
	if opts.Swtpm == "" {
		opts.Swtpm = "swtpm"
	}
	c, file, err := runnerconfig.LoadFile(opts.ConfigFile)
	if err != nil {
		return nil, &ExitError{Code: runnerconfig.ExitConfig, Err: err}
	}
	r := &Runner{
		opts:        opts,
		apiConfig:   apiConfig{file: string(file)},
		log:         opts.Logger.With("vm", c.VM.Name),
		configDir:   filepath.Dir(opts.ConfigFile),
		config:      c,
		passwords:   make(chan passwordRequest),
		freezes:     make(chan freezeRequest),
		pushes:      make(chan pushRequest),
		diskQueries: make(chan chan diskAnswer),
		diskRetry:   diskRetry, diskSettle: diskSettle, qmpPing: qmpPing,
		loopBeat: loopBeat, loopStale: loopStale, bootWait: bootWait,
	}
	r.dataDir, r.runtimeDir = DataDir(c), RuntimeDir(c)
	return r, nil
}

// Name is the VM's name from the config.
func (r *Runner) Name() string { return r.config.VM.Name }

// UseReporter sends the VM's status to rep from now on.
func (r *Runner) UseReporter(rep Reporter) { r.opts.Reporter = rep }

// FollowConfig makes the runner apply each config that updates brings
// (its ConfigMap's config.yaml, as the API server has it) as it applies a
// change of the config file. The file, which the kubelet refreshes a
// minute or so later, then counts only when it holds a config that did not
// come this way: an older one cannot undo a newer change, and should the
// updates stop, the file's changes still apply. Call it before Run.
func (r *Runner) FollowConfig(updates <-chan []byte) {
	r.configUpdates = updates
}

// Run starts the VM and keeps it in line with its config until ctx ends
// (SIGTERM), then shuts the guest down. The error, an *ExitError, carries
// the exit code; nil means the guest shut down cleanly.
func (r *Runner) Run(ctx context.Context) error {
	defer r.cleanup()
	started := time.Now()
	// Watched from before the start: a change while qemu starts is applied
	// once the loop runs.
	watcher, err := r.watchConfig()
	if err != nil {
		return r.startFailed(ctx, &ExitError{Code: runnerconfig.ExitFailed, Err: err})
	}
	defer watcher.Close()
	if err := r.launch(ctx); err != nil {
		return r.startFailed(ctx, r.startError(err))
	}
	// Subscribed before the guest runs: the loop sees all its events.
	events := r.mon.Events(context.Background())
	if err := r.mon.Cont(ctx); err != nil {
		return r.startFailed(ctx, r.startError(fmt.Errorf("QMP cont: %w", err)))
	}
	r.running(ctx)
	r.log.Info("VM running", "startup", time.Since(started).Round(time.Millisecond), "accel", r.machine.Accel, "qemu", r.mon.Version())
	r.event(ctx, Event{Reason: ReasonQemuStarted, Action: actionStart, Message: startedMessage(r.machine.Accel, r.config.VM.Accelerator)})
	stopProbe, err := r.serveProbe()
	if err != nil {
		return &ExitError{Code: runnerconfig.ExitFailed, Err: err}
	}
	defer stopProbe()
	// Not ctx: a qemu that hangs while the guest is asked to stop is
	// killed too.
	watch, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWatch()
	go r.watchQemu(watch)
	return r.loop(ctx, events, watcher)
}

// Check starts qemu paused with the config, applies its current values
// over QMP and quits qemu: it tells whether this host's qemu accepts the
// VM, without running the guest. A CD medium that cannot be opened is no
// error here (the VM would boot without it); Status tells of it.
func (r *Runner) Check(ctx context.Context) error {
	defer r.cleanup()
	if err := r.launch(ctx); err != nil {
		return r.startError(err)
	}
	if err := r.mon.Quit(ctx); err != nil && !r.qemu.exited() {
		return fmt.Errorf("QMP quit: %w", err)
	}
	return nil
}

// Status is the VM's status as last reported.
func (r *Runner) Status() Status { return r.status }

// startError is the ExitError for a failed start: qemu's own reason when
// it exited, else the runner's.
func (r *Runner) startError(err error) error {
	if exit := (*ExitError)(nil); errors.As(err, &exit) {
		return exit
	}
	if r.qemu != nil {
		select {
		case <-r.qemu.done:
			if w := r.qemu.lastWords(); w != "" {
				return &ExitError{Code: runnerconfig.ExitQemuRefused, Err: fmt.Errorf("qemu refused to start (%s): %s", r.qemu.describe(), w)}
			}
			return &ExitError{Code: runnerconfig.ExitQemuRefused, Err: fmt.Errorf("qemu %s while starting: %w", r.qemu.describe(), err)}
		case <-time.After(100 * time.Millisecond): // a dying qemu closes QMP first
		}
	}
	return &ExitError{Code: runnerconfig.ExitFailed, Err: err}
}

// launch prepares everything, starts qemu paused and applies the config's
// current values over QMP.
func (r *Runner) launch(ctx context.Context) error {
	c := r.config
	for _, d := range []string{r.dataDir, r.runtimeDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	// First: the agent gives the runner its devices, which the checks
	// below and qemu open.
	if err := r.preparePod(ctx); err != nil {
		return err
	}
	if err := adoptFiles(r.dataDir, os.Getuid()); err != nil {
		return err
	}
	if err := checkDisksFilled(&c.VM, r.dataDir); err != nil {
		return &ExitError{Code: runnerconfig.ExitImport, Err: err}
	}
	if err := ensureDiskFiles(&c.VM); err != nil {
		return err
	}
	id, err := machineUUID(c, r.dataDir)
	if err != nil {
		return dataFull(r.dataDir, err)
	}
	fw, err := FindFirmware(c.VM.Firmware, r.dataDir)
	if err != nil {
		return dataFull(r.dataDir, err)
	}
	if c.VM.UseTPM {
		if low := dataRoomLow(r.dataDir); low != "" {
			r.event(ctx, Event{Warning: true, Reason: ReasonDataVolumeFull, Action: actionStart, Message: low})
		}
	}
	kvm := c.VM.Accelerator != "tcg" && c.VM.Accelerator != "none" && kvm.Usable() == nil
	m := NewMachine(&c.VM, id, kvm, fw, r.runtimeDir, isBlockDevice)
	if r.opts.SpiceAddress != "" {
		m.SpiceAddress = r.opts.SpiceAddress
	}
	// Locked unless the VM opts out: a password comes later, live.
	m.Ticketing = c.VM.Display != nil && c.VM.Display.Spice != nil && !c.VM.Display.Spice.WithoutPassword
	if m.CloudInitISO, err = r.cloudInit(); err != nil {
		return err
	}
	// A socket left by a runner that was killed would look like qemu's.
	_ = os.Remove(m.QMPSocket)
	if c.VM.UseTPM {
		if m.TPMSocket, err = r.startSwtpm(ctx); err != nil {
			return err
		}
	}
	// Before qemu, which connects to it at its start.
	r.console, err = serialconsole.Listen(serialconsole.Options{
		Dir: r.runtimeDir, PodLog: r.opts.ConsoleOutput, PodLogPrefix: consolePrefix, Logger: r.log,
	})
	if err != nil {
		return fmt.Errorf("serial console: %w", err)
	}
	r.console.SetPodLog(c.VM.PodLog())
	m.ConsoleSocket = r.console.GuestPath()
	if err := checkTapNetworks(&c.VM); err != nil {
		return &ExitError{Code: runnerconfig.ExitNetwork, Err: err}
	}
	if err := r.servePodNetwork(ctx); err != nil {
		return &ExitError{Code: runnerconfig.ExitNetwork, Err: err}
	}
	args, err := ExpandTemplate(ctx, r.opts.TemplateHelper, c.Template, append(r.opts.TemplateDirs, "/opt/vmrunner/templates"), m)
	if err != nil {
		return err
	}
	r.machine = m
	r.log.Debug("Starting qemu", "args", args)
	if r.qemu, err = startProcess("qemu", r.opts.Qemu, args, r.opts.QemuOutput); err != nil {
		return err
	}
	dialCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.qemu.waitFor(dialCtx, m.QMPSocket); err != nil {
		return err
	}
	mon, err := qmp.Dial(dialCtx, m.QMPSocket)
	if err != nil {
		return fmt.Errorf("QMP: %w", err)
	}
	return r.attach(ctx, mon)
}

// attach takes over qemu's monitor and applies the config's current values
// while qemu is still paused.
func (r *Runner) attach(ctx context.Context, mon *qmp.Monitor) error {
	r.mon = mon
	r.live = newLiveState(r)
	r.guest = newGuestWatch()
	return r.live.apply(ctx, r.config)
}

// running notes that the guest runs: the status and the probe say so.
func (r *Runner) running(ctx context.Context) {
	// BALLOON_CHANGE comes only when the guest's RAM changes: a VM that
	// starts with all its RAM would never report any.
	if actual, err := r.mon.QueryBalloon(ctx); err == nil {
		r.status.RAM = actual
	}
	r.status.Running = true
	r.status.Accelerator = r.machine.Accel
	r.ready.Store(true)
	r.report(ctx)
}

// cloudInit makes the NoCloud seed from the config's cloudInit, else from
// the files projected next to the config; "" when there is no data.
func (r *Runner) cloudInit() (string, error) {
	var d cloudinit.Data
	var err error
	if ci := r.config.CloudInit; ci != nil {
		if d, err = cloudinit.FromConfig(ci, r.config.VM.Name); err != nil {
			return "", err
		}
	} else {
		var ok bool
		d, ok, err = cloudinit.FromDir(filepath.Join(r.configDir, vmpod.CloudInitDir))
		if err != nil || !ok {
			return "", err
		}
	}
	if err := d.Default(r.config.VM.Name); err != nil {
		return "", err
	}
	iso := filepath.Join(r.runtimeDir, "cloud-init.iso")
	if err := cloudinit.WriteISO(iso, d); err != nil {
		return "", fmt.Errorf("cloud-init seed: %w", err)
	}
	return iso, nil
}

// startSwtpm starts the software TPM, its state in the data directory,
// and returns its socket once it listens.
func (r *Runner) startSwtpm(ctx context.Context) (string, error) {
	state := filepath.Join(r.dataDir, "tpm")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return "", err
	}
	sock := filepath.Join(r.runtimeDir, "swtpm.sock")
	_ = os.Remove(sock)
	p, err := startProcess("swtpm", r.opts.Swtpm, []string{
		"socket", "--tpm2", "--tpmstate", "dir=" + state,
		"--ctrl", "type=unixio,path=" + sock, "--terminate",
	}, r.opts.QemuOutput)
	if err != nil {
		return "", err
	}
	r.swtpm = p
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return sock, p.waitFor(waitCtx, sock)
}

// cleanup stops what is still running and removes the runtime files.
func (r *Runner) cleanup() {
	if r.mon != nil {
		r.mon.Close()
	}
	for _, p := range []*process{r.qemu, r.swtpm} {
		if p != nil {
			p.kill()
		}
	}
	// After qemu: the guest's last words are read first.
	if r.console != nil {
		if err := r.console.Close(); err != nil {
			r.log.Warn("Closing the serial console", "err", err)
		}
	}
	if r.runtimeDir != "" {
		_ = os.RemoveAll(r.runtimeDir)
	}
}

// exitFor turns how qemu ended into the runner's result.
func exitFor(qemu *process, guestShutdown, forced bool, hung *string) error {
	switch {
	case hung != nil:
		return &ExitError{Code: runnerconfig.ExitCrashed, Err: errors.New(*hung)}
	case forced:
		return &ExitError{Code: runnerconfig.ExitForced, Err: errors.New("the guest did not shut down within powerdownTimeout: qemu was stopped hard")}
	case guestShutdown && qemu.err == nil:
		return nil
	default:
		return &ExitError{Code: runnerconfig.ExitCrashed, Err: fmt.Errorf("qemu %s without a guest shutdown", qemu.describe())}
	}
}
