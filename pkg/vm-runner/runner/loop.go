package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vmpod"
)

const (
	// reloadDelay lets a ConfigMap update (several renames) settle.
	reloadDelay = 20 * time.Millisecond
	// quitGrace is how long qemu gets to quit before it is killed.
	quitGrace = 5 * time.Second
	// agentShutdownGrace is how long a guest whose agent took the
	// shutdown may take to go down before the runner also presses the ACPI
	// power button (a Debian guest under TCG: 2-5 s).
	agentShutdownGrace = 20 * time.Second
	// lastEventsWait bounds the wait for qemu's last events after its
	// exit; its socket closes with it, so they come at once.
	lastEventsWait = time.Second
	// cdRetry is how often a CD change that waits for the guest's tray
	// asks again.
	cdRetry = 2 * time.Second
	// bootWait is how long a guest may run before its agent connects
	// without a warning (BootOverdue): a Debian guest's agent connects
	// within a minute under TCG, a Windows installation's takes longer.
	bootWait = 10 * time.Minute
)

// watchConfig watches the config directory: a ConfigMap volume replaces
// files by swapping a symlink, so the directory, not the file.
func (r *Runner) watchConfig() (*fsnotify.Watcher, error) {
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := watcher.Add(r.configDir); err != nil {
		watcher.Close()
		return nil, err
	}
	return watcher, nil
}

// loop handles everything while the VM runs: the end of ctx (SIGTERM)
// starts a clean shutdown, QMP events (from a subscription of the
// monitor's) update the live state and status, and changes of the config
// directory (watcher) are applied.
func (r *Runner) loop(ctx context.Context, events <-chan qmp.Event, watcher *fsnotify.Watcher) error {
	reload := time.NewTimer(time.Hour)
	reload.Stop()

	var (
		sigterm                 = ctx.Done()
		stopping                bool
		stopStarted             time.Time
		stopTimer, killTimer    <-chan time.Time
		acpiLater               <-chan time.Time
		cdRetryC                <-chan time.Time // armed while a CD change waits for the guest's tray
		diskRetryC, diskSettleC <-chan time.Time // armed while the guest is paused on a disk's error
		diskErrors              int              // at the last retry
		bootC                   <-chan time.Time // armed while the guest agent is not connected
		bootArmed               int              // r.live.agentChanges when bootC was armed
		guestShutdown, forced   bool
		stopTimerT, killTimerT  *time.Timer
	)
	armStop := func() {
		if stopTimerT != nil {
			stopTimerT.Stop()
		}
		left := time.Until(stopStarted.Add(time.Duration(*r.config.VM.PowerdownTimeout) * time.Second))
		stopTimerT = time.NewTimer(max(left, 0))
		stopTimer = stopTimerT.C
	}
	bg := context.WithoutCancel(ctx)
	beat := time.NewTicker(r.loopBeat)
	defer beat.Stop()
	r.beat.Store(time.Now().UnixNano())
	for {
		if cdRetryC == nil && len(r.live.pendingCDs) > 0 && !stopping {
			cdRetryC = time.After(cdRetry)
		}
		if diskRetryC == nil && diskSettleC == nil && r.status.DiskPause != nil {
			diskRetryC = time.After(r.diskRetry)
		}
		if bootC == nil && !r.live.agentConnected && r.status.BootOverdue == 0 && !stopping {
			bootC, bootArmed = time.After(r.bootWait), r.live.agentChanges
		}
		select {
		case now := <-beat.C:
			r.beat.Store(now.UnixNano())
		case <-sigterm:
			sigterm = nil
			stopping, stopStarted = true, time.Now()
			if r.freeze != nil {
				// A frozen guest cannot shut down.
				if _, err := r.thawGuest(bg, ReasonThawed, "the VM is stopping"); err != nil {
					r.log.Error("Thawing the guest before its shutdown", "err", err)
				}
			}
			r.live.stopping = true
			r.ready.Store(false)
			r.status.Running = false
			r.report(bg)
			if r.status.GuestPanic {
				// A panicked guest cannot shut down: qemu stops at once.
				stopTimerT = time.NewTimer(0)
				stopTimer = stopTimerT.C
				continue
			}
			if r.askGuestToStop(bg) {
				// An agent can take the request and the guest still not go
				// down (the agent was being stopped, shutdown failed):
				// the power button too, later. A guest already shutting
				// down ignores it.
				acpiLater = time.After(agentShutdownGrace)
			}
			armStop()
		case <-acpiLater:
			acpiLater = nil
			r.log.Warn("The guest still runs after its agent took the shutdown", "after", agentShutdownGrace)
			r.pressPowerButton(bg, fmt.Sprintf(": the guest still runs %s after its agent took the shutdown", agentShutdownGrace))
		case <-stopTimer:
			stopTimer = nil
			forced = true
			msg := fmt.Sprintf("The guest did not shut down within powerdownTimeout (%ds): qemu is stopped hard", *r.config.VM.PowerdownTimeout)
			if r.status.GuestPanic {
				msg = "The guest had panicked and cannot shut down: qemu is stopped at once"
			}
			r.log.Warn(msg)
			r.event(bg, Event{Warning: true, Reason: ReasonShutdownForced, Action: actionStop, Message: msg})
			// A qemu whose monitor hangs would hold the loop.
			quitCtx, cancel := context.WithTimeout(bg, quitGrace)
			if err := r.mon.Quit(quitCtx); err != nil {
				r.qemu.kill()
			}
			cancel()
			killTimerT = time.NewTimer(quitGrace)
			killTimer = killTimerT.C
		case <-killTimer:
			r.qemu.kill()
		case <-r.qemu.done:
			if killTimerT != nil {
				killTimerT.Stop()
			}
			// qemu's last events can still be on their way when its exit is
			// noticed.
			guestShutdown = guestShutdownIn(events) || guestShutdown
			return r.qemuEnded(bg, guestShutdown, forced, stopStarted)
		case ev, ok := <-events:
			if !ok {
				events = nil // the monitor closed; qemu's exit follows
				continue
			}
			guestShutdown = guestShutdown || isGuestShutdown(ev)
			r.handleEvent(bg, ev)
		case we := <-watcher.Events:
			if r.watched(we.Name) {
				reload.Reset(reloadDelay)
			}
		case c := <-r.configUpdates:
			r.apiConfig.add(c)
			reload.Reset(reloadDelay)
		case err := <-watcher.Errors:
			r.log.Error("Watching the config directory", "err", err)
		case <-cdRetryC:
			cdRetryC = nil
			if !stopping {
				r.live.retryCDs(bg)
			}
		case <-bootC:
			bootC = nil
			// Armed while the agent was away; no change since means it
			// still is. After a change it is re-armed above if need be.
			if bootArmed == r.live.agentChanges && !stopping && !r.status.GuestPanic {
				r.bootOverdue(bg)
			}
		case <-diskRetryC:
			diskRetryC = nil
			diskErrors = r.retryDisk(bg)
			diskSettleC = time.After(r.diskSettle)
		case <-diskSettleC:
			diskSettleC = nil
			r.diskSettled(bg, diskErrors)
		case a := <-r.guest.answers:
			if !r.live.agentConnected {
				continue
			}
			if !r.live.bootTold {
				r.live.bootTold = true
				r.event(bg, Event{Reason: ReasonBooted, Action: actionBoot, Message: bootedMessage(a.info, a.told)})
			}
			if a.told && !reflect.DeepEqual(a.info, r.status.Guest) {
				r.setGuest(a.info)
				r.report(bg)
			}
		case p := <-r.passwords:
			p.done <- r.live.handOverPassword(bg, []byte(p.Password), p.Expiry)
			r.report(bg)
		case f := <-r.freezes:
			n, err := r.freezeGuest(bg, f.timeout)
			f.done <- freezeResult{fileSystems: n, err: err}
		case p := <-r.pushes:
			p.done <- r.startPush(bg, p.req)
		case d := <-r.diskQueries:
			disks, err := r.diskSizes(bg)
			d <- diskAnswer{disks: disks, err: err}
		case <-r.freezeExpiry():
			r.freezeExpired(bg)
		case <-reload.C:
			r.reload(bg)
			if stopping && stopTimer != nil {
				armStop() // a new powerdownTimeout counts from the start of the stop
			}
		}
	}
}

// bootOverdue tells that the guest agent has not connected within
// r.bootWait: a guest stuck in its boot, or one without an agent. Either
// way the guest is left running: a restart would not help the one and
// would harm the other.
func (r *Runner) bootOverdue(ctx context.Context) {
	r.status.BootOverdue = r.bootWait
	msg := BootOverdueMessage(r.bootWait)
	r.log.Warn(msg)
	r.event(ctx, Event{Warning: true, Reason: ReasonBootOverdue, Action: actionBoot, Message: msg})
	r.report(ctx)
}

// isGuestShutdown tells whether ev is the guest's shutdown: it ends qemu
// cleanly.
func isGuestShutdown(ev qmp.Event) bool {
	guest, _ := ev.Data["guest"].(bool)
	return ev.Name == qmp.EventShutdown && guest
}

// guestShutdownIn reads the events left after qemu exited and tells
// whether the guest's shutdown is among them. The channel closes when the
// monitor's connection, which ends with qemu, has delivered them all.
func guestShutdownIn(events <-chan qmp.Event) bool {
	if events == nil {
		return false
	}
	found := false
	timeout := time.After(lastEventsWait)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return found
			}
			found = found || isGuestShutdown(ev)
		case <-timeout:
			return found
		}
	}
}

// watched tells whether a change of path concerns the runner: the config
// file, the display password files, or a ConfigMap/Secret volume swap.
func (r *Runner) watched(path string) bool {
	switch filepath.Base(path) {
	case filepath.Base(r.opts.ConfigFile), vmpod.DisplayPasswordFile, vmpod.PasswordExpiryFile, "..data":
		return true
	}
	return false
}

// qemuEnded turns the way qemu ended into the runner's exit. stopStarted
// is when the runner asked the guest to stop; zero when it did not.
func (r *Runner) qemuEnded(ctx context.Context, guestShutdown, forced bool, stopStarted time.Time) error {
	r.ready.Store(false)
	r.status.Running = false
	r.status.Booted = false
	r.guest.stop()
	r.setGuest(guestagent.Info{})
	r.status.ConsoleClient = ""
	r.report(ctx)
	err := exitFor(r.qemu, guestShutdown, forced, r.hung.Load())
	stopping := !stopStarted.IsZero()
	shutdown := Event{Reason: ReasonGuestShutdown, Action: actionShutdown}
	switch {
	case err == nil && !stopping && r.config.GuestShutdownStops:
		// The guest shut itself down: keep the pod from restarting it.
		shutdown.Message = "The guest shut itself down; it stays stopped (spec.guestShutdownStops)"
		if err := r.opts.Reporter.SetStopped(ctx); err != nil {
			r.log.Error("Could not set the desired state to Stopped", "err", err)
			shutdown.Message = "The guest shut itself down; setting the VM's state to Stopped (spec.guestShutdownStops) failed: " + err.Error()
		}
		r.log.Info("The guest shut down; its desired state is now Stopped")
		r.event(ctx, shutdown)
	case err == nil && !stopping:
		r.log.Info("The guest shut down cleanly")
		shutdown.Message = "The guest shut itself down; it starts again (spec.guestShutdownStops is not set)"
		r.event(ctx, shutdown)
	case err == nil:
		r.log.Info("The guest shut down cleanly")
		r.event(ctx, Event{Reason: ReasonShutdownCompleted, Action: actionShutdown,
			Message: fmt.Sprintf("The guest shut down %s after it was asked to", seconds(time.Since(stopStarted)))})
	default:
		r.log.Error("VM stopped", "err", err)
		if !forced { // ShutdownForced told of it
			msg := err.Error()
			if w := r.qemu.lastWords(); w != "" {
				msg += "; its last words: " + w
			}
			reason := ReasonQemuExited
			if r.hung.Load() != nil {
				reason = ReasonQemuHung
			}
			r.event(ctx, Event{Warning: true, Reason: reason, Action: actionExit, Message: msg})
		}
	}
	return err
}

// askGuestToStop asks the guest to shut down: through the guest agent when
// it is connected (works without ACPI), else with the ACPI power button.
// It tells whether the agent took the request.
func (r *Runner) askGuestToStop(ctx context.Context) (byAgent bool) {
	r.guest.stop()
	if r.live.agentConnected {
		if err := agentShutdown(ctx, r.machine.GuestAgentSocket); err == nil {
			r.log.Info("Asked the guest agent to shut down", "powerdownTimeout", *r.config.VM.PowerdownTimeout)
			r.event(ctx, Event{Reason: ReasonShutdownRequested, Action: actionShutdown,
				Message: fmt.Sprintf("Asked the guest agent to shut the guest down (powerdownTimeout %ds)", *r.config.VM.PowerdownTimeout)})
			return true
		} else {
			r.log.Warn("The guest agent did not take the shutdown; trying ACPI", "err", err)
		}
	}
	r.pressPowerButton(ctx, "")
	return false
}

// pressPowerButton sends the ACPI power button; because, when not empty,
// tells the event why (": ...").
func (r *Runner) pressPowerButton(ctx context.Context, because string) {
	if err := r.mon.SystemPowerdown(ctx); err != nil {
		r.log.Error("system_powerdown", "err", err)
		return
	}
	r.log.Info("Sent the ACPI power button", "powerdownTimeout", *r.config.VM.PowerdownTimeout)
	r.event(ctx, Event{Reason: ReasonShutdownRequested, Action: actionShutdown,
		Message: fmt.Sprintf("Pressed the ACPI power button%s (powerdownTimeout %ds)", because, *r.config.VM.PowerdownTimeout)})
}

// reload reads the config again and applies what can change live. An
// invalid config leaves the VM as it is.
func (r *Runner) reload(ctx context.Context) {
	c, err := r.loadConfig()
	if err != nil {
		r.log.Error("The changed config is invalid; the VM keeps its settings", "err", err)
		return
	}
	if restart := restartFields(&r.config.VM, &c.VM); !slices.Equal(restart, r.status.RestartRequired) {
		if len(restart) > 0 {
			r.log.Warn("Config changes that apply at the next start", "fields", restart)
		}
		r.status.RestartRequired = restart
		r.report(ctx)
	}
	if err := r.live.apply(ctx, c); err != nil {
		r.log.Error("Applying the config", "err", err)
	}
	if on := c.VM.PodLog(); on != r.config.VM.PodLog() {
		r.console.SetPodLog(on)
		r.log.Info("Serial console in the pod log", "podLog", on)
	}
	// The started machine stays what it was; only live values follow.
	vm := r.config.VM
	vm.CurrentCPUs, vm.CurrentRAM, vm.PowerdownTimeout = c.VM.CurrentCPUs, c.VM.CurrentRAM, c.VM.PowerdownTimeout
	vm.SerialConsole = c.VM.SerialConsole
	c.VM = vm
	r.config = c
}

// loadConfig reads the config to apply: the API server's newest (see
// FollowConfig) unless the file holds one that did not come from it.
func (r *Runner) loadConfig() (*runnerconfig.Config, error) {
	data, err := runnerconfig.ReadFile(r.opts.ConfigFile)
	if err != nil {
		return nil, err
	}
	from := r.opts.ConfigFile
	if r.apiConfig.stands(data) {
		data, from = r.apiConfig.newest, fmt.Sprintf("ConfigMap %s, %s", r.Name(), vmpod.ConfigFile)
	}
	c, err := runnerconfig.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return c, nil
}

// apiConfig is what came through FollowConfig: the newest config, and the
// recent ones, by which the volume's file, which lags, is known as older.
type apiConfig struct {
	newest []byte
	recent []string // the newest last
	// file is the file's config when last read; fresh: newest came after
	// the file last changed to a config of its own.
	file  string
	fresh bool
}

// recentConfigs is how many configs apiConfig remembers: more than a
// volume lags behind.
const recentConfigs = 16

func (a *apiConfig) add(c []byte) {
	a.newest, a.fresh = c, true
	a.recent = append(a.recent, string(c))
	if len(a.recent) > recentConfigs {
		a.recent = a.recent[1:]
	}
}

// stands tells whether the API server's newest config applies rather than
// file, the volume's: it came, and the file holds none of its own since.
func (a *apiConfig) stands(file []byte) bool {
	if a.newest == nil {
		return false
	}
	if string(file) != a.file {
		a.file = string(file)
		if !slices.Contains(a.recent, a.file) {
			a.fresh = false // new in the file: the updates missed it
		}
	}
	return a.fresh
}

// restartFields lists the fields of the VM that differ and cannot change
// while it runs.
func restartFields(old, new *runnerconfig.VM) []string {
	a, b := *old, *new
	for _, v := range []*runnerconfig.VM{&a, &b} {
		v.CurrentCPUs, v.CurrentRAM, v.PowerdownTimeout, v.SerialConsole = 0, runnerconfig.Size{}, nil, nil
		v.Drives = slices.Clone(v.Drives)
		for i := range v.Drives {
			if v.Drives[i].Type == runnerconfig.DriveCDROM {
				v.Drives[i].File = "" // CD media change live
			}
		}
	}
	var out []string
	ta, tb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range ta.NumField() {
		if !reflect.DeepEqual(ta.Field(i).Interface(), tb.Field(i).Interface()) {
			tag, _, _ := strings.Cut(ta.Type().Field(i).Tag.Get("json"), ",")
			out = append(out, tag)
		}
	}
	return out
}
