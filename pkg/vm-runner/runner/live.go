package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vmpod"
)

// liveState is what the runner changes while qemu runs: CPUs, the balloon,
// CD media, the display password and resets.
type liveState struct {
	r *Runner
	// cds is the medium of each CD drive (by id) as last applied,
	// pendingCDs the ones that wait for their tray to open, and failedCDs
	// the media that could not be opened (not tried again until the
	// config names another).
	cds, pendingCDs map[string]string
	failedCDs       map[string]CDProblem
	// unplugging holds the CPUs asked to go, until qemu reports them gone.
	unplugging map[string]bool
	cpus       int32
	// vcpuThreads counts the vCPU threads qemu started in this run. Under
	// TCG each takes one of maximumCpus translation contexts, which qemu
	// never frees (an unplugged CPU's neither): it aborts at a plug beyond
	// them (tcg_register_thread's assertion), so the runner plugs no more.
	// deferredCPUs is the count last put off for that, told once.
	vcpuThreads  int
	deferredCPUs int32
	ram          int64
	// password is the SPICE password last set; secretPassword and
	// secretExpiry what the display Secret's files held when last read.
	password, secretPassword []byte
	secretExpiry             string
	secretRead               bool
	// diskErrors counts qemu's BLOCK_IO_ERRORs, so that a retry can tell
	// whether its request failed again.
	diskErrors int
	// openWarned: the Secret's password of a display that runs without
	// one was reported.
	openWarned     bool
	agentConnected bool
	// agentChanges counts the agent's connections and disconnections, so
	// that a boot wait armed before one is not taken for the current.
	agentChanges int
	// bootTold: the Booted event went out for the agent's connection.
	bootTold bool
	// ramChanging: a live change of the RAM waits for the balloon to
	// reach it.
	ramChanging bool
	// resetCounter is the highest resetCounter applied; the one of the
	// config the VM started with counts as applied.
	resetCounter int64
	// stopping is set once the guest is asked to shut down: a reset then
	// would undo the shutdown.
	stopping bool
}

func newLiveState(r *Runner) *liveState {
	l := &liveState{r: r, cds: map[string]string{}, pendingCDs: map[string]string{}, failedCDs: map[string]CDProblem{},
		unplugging: map[string]bool{}, resetCounter: r.config.ResetCounter, vcpuThreads: int(r.config.VM.CurrentCPUs)}
	for _, cd := range r.machine.CDROMs {
		l.cds[cd.ID] = "" // empty on qemu's command line; apply inserts the media
	}
	return l
}

// apply brings the live values of qemu in line with c: at the start (qemu
// paused) and after each config change.
func (l *liveState) apply(ctx context.Context, c *runnerconfig.Config) error {
	var errs []error
	if c.VM.CurrentCPUs != l.cpus {
		if err := l.setCPUs(ctx, c.VM.CurrentCPUs); err != nil {
			errs = append(errs, fmt.Errorf("currentCpus: %w", err))
		}
	}
	if ram := c.VM.CurrentRAM.Bytes; ram != l.ram {
		if err := l.r.mon.Balloon(ctx, ram); err != nil {
			errs = append(errs, fmt.Errorf("currentRam: %w", err))
		} else {
			l.r.log.Info("Balloon target set", "bytes", ram)
			l.ram = ram
			l.ramChanging = l.r.status.Running
		}
	}
	i := 0
	for _, d := range c.VM.Drives {
		if d.Type != runnerconfig.DriveCDROM {
			continue
		}
		id := CDROMID(i)
		i++
		if _, known := l.cds[id]; !known {
			continue // a drive added to the config needs a restart
		}
		// A medium is about one drive, not the VM: its failure leaves the
		// drive empty and shows in the status.
		l.changeCD(ctx, id, d.File)
	}
	l.cdStatus()
	if err := l.updatePassword(ctx); err != nil {
		errs = append(errs, fmt.Errorf("display password: %w", err))
	}
	// Last, so that the guest boots again with the other changes applied
	// (say, a new CD to boot from).
	if err := l.reset(ctx, c.ResetCounter); err != nil {
		errs = append(errs, fmt.Errorf("resetCounter: %w", err))
	}
	l.r.report(ctx)
	return errors.Join(errs...)
}

// reset resets the guest (system_reset, the reset button) when counter is
// above the last applied one. A lower or equal value does nothing.
func (l *liveState) reset(ctx context.Context, counter int64) error {
	r := l.r
	switch {
	case counter <= l.resetCounter:
		if counter != r.config.ResetCounter { // changed, but not up: say why nothing happens
			r.log.Info("resetCounter is not above the last applied one: no reset", "resetCounter", counter, "applied", l.resetCounter)
		}
		return nil
	case l.stopping:
		r.log.Info("resetCounter increased while the guest shuts down: no reset", "resetCounter", counter)
		l.resetCounter = counter
		return nil
	}
	if err := r.mon.SystemReset(ctx); err != nil {
		return err
	}
	l.resetCounter = counter
	r.log.Info("Guest reset", "resetCounter", counter)
	if r.status.GuestPanic {
		// The reset machine stays paused where the panic left it.
		if err := r.mon.Cont(ctx); err != nil {
			return err
		}
		r.status.GuestPanic = false
		r.paused.Store(nil)
		r.ready.Store(true)
		r.report(ctx)
	}
	return nil
}

// setCPUs plugs or unplugs CPUs until qemu has target of them. Unplugging
// completes when the guest has ejected the CPU (DEVICE_DELETED).
func (l *liveState) setCPUs(ctx context.Context, target int32) error {
	l.cpus = target
	slots, err := l.r.mon.QueryHotpluggableCPUs(ctx)
	if err != nil {
		return err
	}
	// Slots in topology order; plug the lowest free ones, unplug the
	// highest (never the first, which boots the machine).
	slices.SortFunc(slots, func(a, b qmp.HotpluggableCPU) int { return strings.Compare(slotID(a), slotID(b)) })
	var plugged []qmp.HotpluggableCPU
	for _, s := range slots {
		if s.QOMPath != "" && !l.unplugging[s.QOMPath] {
			plugged = append(plugged, s)
		}
	}
	n := int32(len(plugged))
	for _, s := range slots {
		if n >= target {
			break
		}
		if s.QOMPath != "" {
			continue
		}
		if l.r.machine.Accel == "tcg" && l.vcpuThreads >= int(l.r.config.VM.MaximumCPUs) {
			l.cpusDeferred(ctx, target, n)
			break
		}
		if err := l.r.mon.AddCPU(ctx, s, slotID(s)); err != nil {
			return err
		}
		l.vcpuThreads++
		n++
	}
	for i := len(plugged) - 1; i > 0 && n > target; i-- {
		p := plugged[i].QOMPath
		if err := l.r.mon.DeviceDel(ctx, p); err != nil {
			return err
		}
		l.unplugging[p] = true
		n--
	}
	l.r.log.Info("CPUs set", "target", target, "plugged", len(plugged))
	return l.countCPUs(ctx)
}

// cpusDeferred tells, once per target, that qemu under TCG can plug no
// more CPUs in this run: the guest keeps has of them until its next start.
func (l *liveState) cpusDeferred(ctx context.Context, target, has int32) {
	l.r.log.Warn("CPUs not plugged: qemu under TCG has started all the CPU threads it can in one run", "target", target, "plugged", has)
	if l.deferredCPUs == target {
		return
	}
	l.deferredCPUs = target
	l.r.event(ctx, Event{Warning: true, Reason: ReasonCPUsDeferred, Action: actionSetCPUs, Message: fmt.Sprintf(
		"The guest keeps %d CPUs until its next start (kubectl vm restart), then gets %d: qemu emulates it (tcg), and can start "+
			"only maximumCpus (%d) CPU threads in one run, an unplugged CPU's included", has, target, l.vcpuThreads)})
}

// slotID names a CPU slot by its topology, e.g. cpu-s0-c2-t0; sorting
// the names sorts the slots for the small counts VMs have.
func slotID(c qmp.HotpluggableCPU) string {
	part := func(p *int) string {
		if p == nil {
			return "x"
		}
		return fmt.Sprintf("%04d", *p)
	}
	return fmt.Sprintf("cpu-s%s-d%s-c%s-t%s", part(c.Props.SocketID), part(c.Props.DieID), part(c.Props.CoreID), part(c.Props.ThreadID))
}

// countCPUs updates the status from qemu's view.
func (l *liveState) countCPUs(ctx context.Context) error {
	slots, err := l.r.mon.QueryHotpluggableCPUs(ctx)
	if err != nil {
		return err
	}
	n := 0
	present := map[string]bool{}
	for _, s := range slots {
		if s.QOMPath != "" {
			n += max(s.VCPUsCount, 1)
			present[s.QOMPath] = true
		}
	}
	for p := range l.unplugging {
		if !present[p] {
			delete(l.unplugging, p)
		}
	}
	if l.r.status.Running && n != l.r.status.CPUs {
		l.r.event(ctx, Event{Reason: ReasonCPUsChanged, Action: actionSetCPUs, Message: fmt.Sprintf("The guest has %d CPUs (before: %d)", n, l.r.status.CPUs)})
	}
	l.r.status.CPUs = n
	return nil
}

// changeCD puts file into drive id (empty: removes the medium). The tray
// is opened first; a guest that locked it delays the change until it
// releases the tray (DEVICE_TRAY_MOVED).
func (l *liveState) changeCD(ctx context.Context, id, file string) {
	if failed, ok := l.failedCDs[id]; ok && failed.Image == file {
		return
	}
	delete(l.failedCDs, id)
	if l.cds[id] == file {
		delete(l.pendingCDs, id)
		return
	}
	l.pendingCDs[id] = file
	open, err := l.openTray(ctx, id)
	switch {
	case err != nil:
		l.cdFailed(ctx, id, err)
	case !open:
		l.r.log.Info("CD change waits for the guest to release the tray", "drive", id)
		p := CDProblem{Drive: id, Index: l.cdIndex(id), Image: file}
		l.r.event(ctx, Event{Reason: ReasonWaitingForTray, Action: actionChangeMedium, Message: p.String()})
	}
}

// cdFailed leaves drive id empty after its pending medium failed, and
// keeps the reason for the status.
func (l *liveState) cdFailed(ctx context.Context, id string, err error) {
	file := l.pendingCDs[id]
	delete(l.pendingCDs, id)
	l.r.log.Error("Cannot change the CD medium; the drive stays empty", "drive", id, "file", file, "err", err)
	// The tray may be open with the old medium: empty it and close it, so
	// that the guest sees an empty drive, as the status says.
	if rerr := l.r.mon.BlockdevRemoveMedium(ctx, id); rerr == nil {
		_ = l.r.mon.BlockdevCloseTray(ctx, id)
		l.cds[id] = ""
	}
	p := CDProblem{Drive: id, Index: l.cdIndex(id), Image: file, Err: err.Error()}
	l.failedCDs[id] = p
	l.r.event(ctx, Event{Warning: true, Reason: ReasonMediumUnavailable, Action: actionChangeMedium, Message: p.String()})
}

// cdIndex is the index of CD drive id in the config's drives.
func (l *liveState) cdIndex(id string) int {
	for _, cd := range l.r.machine.CDROMs {
		if cd.ID == id {
			return cd.Index
		}
	}
	return -1
}

// cdStatus puts the CD drives that do not hold their medium into the
// status, in drive order.
func (l *liveState) cdStatus() {
	var ps []CDProblem
	for _, cd := range l.r.machine.CDROMs {
		p, failed := l.failedCDs[cd.ID]
		if file, pending := l.pendingCDs[cd.ID]; pending {
			p, failed = CDProblem{Drive: cd.ID, Image: file}, true
		}
		if failed {
			p.Index = cd.Index
			ps = append(ps, p)
		}
	}
	l.r.status.CDProblems = ps
}

// openTray asks for the tray of drive id to open and, once it is, changes
// the medium. A guest that has the tray locked (a mounted CD) is asked to
// eject; it may refuse while the medium is in use.
func (l *liveState) openTray(ctx context.Context, id string) (bool, error) {
	if err := l.r.mon.BlockdevOpenTray(ctx, id, false); err != nil {
		return false, err
	}
	open, err := l.trayOpen(ctx, id)
	if err != nil || !open {
		return false, err
	}
	return true, l.finishCD(ctx, id)
}

// retryCDs asks again for the trays of pending CD changes. A guest asked to
// eject while the CD is mounted refuses and is not asked again by qemu; once
// unmounted, its tray is unlocked and a new request opens it.
func (l *liveState) retryCDs(ctx context.Context) {
	for id := range l.pendingCDs {
		if _, err := l.openTray(ctx, id); err != nil {
			l.cdFailed(ctx, id, err)
		}
	}
	l.cdStatus()
	l.r.report(ctx)
}

func (l *liveState) trayOpen(ctx context.Context, id string) (bool, error) {
	devs, err := l.r.mon.QueryBlock(ctx)
	if err != nil {
		return false, err
	}
	for _, d := range devs {
		if d.Device == id+"-drive" { // the template's -drive id
			return d.TrayOpen != nil && *d.TrayOpen, nil
		}
	}
	return false, fmt.Errorf("no drive %s", id)
}

// finishCD applies the pending medium of a drive whose tray is open.
func (l *liveState) finishCD(ctx context.Context, id string) error {
	file, ok := l.pendingCDs[id]
	if !ok {
		return nil
	}
	var err error
	if file == "" {
		if err = l.r.mon.BlockdevRemoveMedium(ctx, id); err == nil {
			err = l.r.mon.BlockdevCloseTray(ctx, id)
		}
	} else {
		err = l.r.mon.BlockdevChangeMedium(ctx, id, file, "raw", true)
	}
	if err != nil {
		return err
	}
	delete(l.pendingCDs, id)
	l.cds[id] = file
	l.r.log.Info("CD medium changed", "drive", id, "file", file)
	if l.r.status.Running {
		what := fmt.Sprintf("inserted %q", file)
		if file == "" {
			what = "ejected the medium"
		}
		l.r.event(ctx, Event{Reason: ReasonMediumChanged, Action: actionChangeMedium,
			Message: fmt.Sprintf("CD drive %s (%s): %s", id, cdField(l.cdIndex(id)), what)})
	}
	return nil
}

// displayPassword reads the display Secret's password file next to the
// config; nil when there is none.
func (r *Runner) displayPassword() []byte {
	b, err := os.ReadFile(filepath.Join(r.configDir, vmpod.DisplayPasswordFile))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	return bytes.TrimSpace(b)
}

// updatePassword applies the display Secret's password and expiry when its
// files changed since they were last read: a password handed over by
// kubectl vm console (handOverPassword) stays until the Secret changes.
// Without a password the display is locked.
func (l *liveState) updatePassword(ctx context.Context) error {
	r := l.r
	if r.config.VM.Display == nil || r.config.VM.Display.Spice == nil {
		return nil
	}
	pw := r.displayPassword()
	expiry := "never"
	if b, err := os.ReadFile(filepath.Join(r.configDir, vmpod.PasswordExpiryFile)); err == nil && len(bytes.TrimSpace(b)) > 0 {
		expiry = strings.TrimSpace(string(b))
	}
	if !r.machine.Ticketing {
		if pw != nil && !l.openWarned {
			l.openWarned = true
			r.log.Warn("The display Secret has a password, but the VM's display runs without one by its annotation")
			r.event(ctx, Event{Warning: true, Reason: ReasonDisplayPasswordChanged, Action: actionSetPassword,
				Message: ErrDisplayWithoutPassword.Error() + ": the display Secret's password is not used"})
		}
		return nil
	}
	if l.secretRead && bytes.Equal(pw, l.secretPassword) && expiry == l.secretExpiry {
		return nil
	}
	l.secretRead, l.secretPassword, l.secretExpiry = true, pw, expiry
	if pw == nil {
		return l.setPassword(ctx, nil, "", "The display Secret holds no password: the display is locked")
	}
	return l.setPassword(ctx, pw, expiry, "The display password changed (expiry: "+expiry+")")
}

// handOverPassword sets a password that kubectl vm console handed to the
// runner through its pod (vm-runner display-password): it applies at once,
// with no wait for the kubelet to refresh the display Secret's volume.
func (l *liveState) handOverPassword(ctx context.Context, pw []byte, expiry string) error {
	if !l.r.machine.Ticketing {
		return ErrDisplayWithoutPassword
	}
	return l.setPassword(ctx, pw, expiry, "kubectl vm console set a display password (expiry: "+expiry+")")
}

// setPassword sets the SPICE password and its expiry; a nil password locks
// the display (a random password that has expired), which is how it starts.
func (l *liveState) setPassword(ctx context.Context, pw []byte, expiry, message string) error {
	r := l.r
	if pw == nil {
		random := make([]byte, 16)
		_, _ = rand.Read(random)
		pw, expiry = []byte(base64.StdEncoding.EncodeToString(random)), "now"
	}
	if !bytes.Equal(pw, l.password) {
		if err := r.mon.SetPassword(ctx, "spice", string(pw), "keep"); err != nil {
			return err
		}
	}
	if err := r.mon.ExpirePassword(ctx, "spice", expiry); err != nil {
		return err
	}
	l.password = pw
	r.status.DisplayPasswordSerial++
	r.log.Info("Display password set", "expiry", expiry, "serial", r.status.DisplayPasswordSerial)
	if r.status.Running {
		r.event(ctx, Event{Reason: ReasonDisplayPasswordChanged, Action: actionSetPassword, Message: message})
	}
	return nil
}

// handleEvent updates the live state and status from a QMP event.
func (r *Runner) handleEvent(ctx context.Context, ev qmp.Event) {
	r.log.Debug("QMP event", "event", ev.Name, "data", ev.Data)
	l := r.live
	switch ev.Name {
	case qmp.EventDeviceTrayMoved:
		id, _ := ev.Data["id"].(string)
		if open, _ := ev.Data["tray-open"].(bool); open {
			if err := l.finishCD(ctx, id); err != nil {
				l.cdFailed(ctx, id, err)
			}
			l.cdStatus()
			r.report(ctx)
		}
	case qmp.EventDeviceDeleted, qmp.EventACPIDeviceOST:
		var err error
		if ev.Name == qmp.EventDeviceDeleted && !l.stopping {
			// The freed slot takes a CPU that a change asked for while
			// all slots were in use.
			err = l.setCPUs(ctx, l.cpus)
		} else {
			err = l.countCPUs(ctx)
		}
		if err != nil {
			r.log.Error("Counting CPUs", "err", err)
		}
		r.report(ctx)
	case qmp.EventBalloonChange:
		if actual, ok := ev.Data["actual"].(float64); ok {
			r.status.RAM = int64(actual)
			r.report(ctx)
			if l.ramChanging && r.status.RAM == l.ram {
				l.ramChanging = false
				r.event(ctx, Event{Reason: ReasonRAMChanged, Action: actionSetRAM, Message: "The guest's RAM is " + mib(l.ram) + " (balloon)"})
			}
		}
	case qmp.EventVserportChange:
		if id, _ := ev.Data["id"].(string); id == "guest-agent" {
			l.agentConnected, _ = ev.Data["open"].(bool)
			l.agentChanges++
			l.bootTold = false
			r.status.Booted = l.agentConnected
			r.status.BootOverdue = 0
			if l.agentConnected && !l.stopping {
				r.guest.start(ctx, r)
			} else {
				r.guest.stop()
				r.setGuest(guestagent.Info{})
			}
			r.report(ctx)
		}
	case qmp.EventBlockIOError:
		r.diskIOError(ctx, ev)
	case qmp.EventGuestPanicked:
		if r.status.GuestPanic {
			return
		}
		r.status.GuestPanic = true
		r.ready.Store(false)
		why := GuestPanicMessage
		r.paused.Store(&why)
		r.log.Warn("The guest's kernel panicked; qemu holds it paused", "data", ev.Data)
		r.event(ctx, Event{Warning: true, Reason: ReasonGuestPanicked, Action: actionPause, Message: GuestPanicMessage})
		r.report(ctx)
	case qmp.EventSpiceInitialized:
		client, _ := ev.Data["client"].(map[string]any)
		if ct, _ := client["channel-type"].(float64); ct != qmp.SpiceChannelMain {
			return // only the main channel stands for a viewer
		}
		r.status.ConsoleClient, _ = client["host"].(string)
		r.report(ctx)
	case qmp.EventSpiceDisconnected:
		// The event does not say which channel closed: ask which main
		// channel, if any, is still connected.
		info, err := r.mon.QuerySpice(ctx)
		if err != nil {
			r.log.Error("Querying SPICE clients", "err", err)
			return
		}
		client := ""
		for _, c := range info.Channels {
			if c.ChannelType == qmp.SpiceChannelMain {
				client = c.Host
			}
		}
		if client != r.status.ConsoleClient {
			r.status.ConsoleClient = client
			r.report(ctx)
		}
	}
}
