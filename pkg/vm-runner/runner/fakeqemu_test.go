package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/qmp/qmptest"
	"github.com/vmop/vmop/test/harness/syncbuffer"
)

// The unit tests of the runner's logic run it against fakeQemu: a
// qmptest server whose answers and events follow qemu 7.2's, reached
// through the real qmp.Monitor, and a child process that stands for
// qemu's.

// fakeQemuArg makes the test binary the stand-in for qemu's process: it
// writes a line, as qemu writes its last words, and exits 0 on SIGTERM,
// as qemu does after quit or a guest's shutdown.
const fakeQemuArg = "-fake-qemu-process"

func init() {
	if len(os.Args) == 2 && os.Args[1] == fakeQemuArg {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		fmt.Println(fakeQemuWords)
		<-term
		os.Exit(0)
	}
}

const fakeQemuWords = "qemu-system-x86_64: the runner's tests' stand-in"

// waitTimeout bounds every wait of these tests; they pass in milliseconds.
const waitTimeout = 5 * time.Second

// fakeQemu is qemu with CPU slots, a balloon and CD drives (cd0...), and
// a guest whose part the test plays: ejecting CPUs, reaching the balloon's
// target, locking and releasing trays, powering off.
type fakeQemu struct {
	t    testing.TB
	srv  *qmptest.Server
	proc *process

	mu      sync.Mutex
	slots   []qmp.HotpluggableCPU // in qemu's order: the highest first
	ejects  map[string]bool       // QOM paths of the CPUs asked to go
	target  int64                 // the balloon's
	actual  int64
	drives  map[string]*fakeDrive
	ignores bool // the guest ignores the ACPI power button
	quitErr bool // quit fails
	// full is the drive whose volume is full ("" none); a cont retries
	// its write, which fails again.
	full string
	// hangs: the monitor answers nothing (a stopped qemu).
	hangs bool
}

type fakeDrive struct {
	open, locked bool
	medium       string
}

// newFakeQemu starts qemu's stand-in for a VM with maxCPUs CPU slots,
// cpus of them plugged, ram bytes and cds CD drives, all empty.
func newFakeQemu(t testing.TB, maxCPUs, cpus int, ram int64, cds int) *fakeQemu {
	t.Helper()
	q := &fakeQemu{t: t, ejects: map[string]bool{}, target: ram, actual: ram, drives: map[string]*fakeDrive{}}
	for i := maxCPUs - 1; i >= 0; i-- {
		s := qmp.HotpluggableCPU{Type: "max-x86_64-cpu", VCPUsCount: 1,
			Props: qmp.CPUProps{SocketID: intp(i), CoreID: intp(0), ThreadID: intp(0)}}
		if i < cpus {
			s.QOMPath = fmt.Sprintf("/machine/unattached/device[%d]", i)
		}
		q.slots = append(q.slots, s)
	}
	for i := range cds {
		q.drives[CDROMID(i)] = &fakeDrive{}
	}
	var err error
	out := &firstWrite{done: make(chan struct{})}
	q.proc, err = startProcess("qemu", os.Args[0], []string{fakeQemuArg}, out)
	require.NoError(t, err)
	t.Cleanup(q.proc.kill)
	select { // its line says that it handles SIGTERM
	case <-out.done:
	case <-time.After(waitTimeout):
		t.Fatalf("qemu's stand-in did not start within %s", waitTimeout)
	}
	q.srv = qmptest.NewServer(t, q.handle)
	go func() { // qemu's end ends its monitor's connection
		<-q.proc.done
		q.mu.Lock()
		defer q.mu.Unlock()
		if c := q.srv.Conn(); c != nil {
			c.Close()
		}
	}()
	return q
}

// firstWrite closes done at the first write.
type firstWrite struct {
	once sync.Once
	done chan struct{}
}

func (w *firstWrite) Write(b []byte) (int, error) {
	w.once.Do(func() { close(w.done) })
	return len(b), nil
}

func intp(i int) *int { return &i }

// commands are the commands received from the n-th on, as
// qmptest.Command.String writes them.
func (q *fakeQemu) commands(n int) []string {
	var out []string
	for _, c := range q.srv.Commands()[n:] {
		out = append(out, c.String())
	}
	return out
}

func (q *fakeQemu) handle(c *qmptest.Conn, cmd qmptest.Command) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.hangs {
		return
	}
	str := func(k string) string { s, _ := cmd.Arguments[k].(string); return s }
	drive := func() *fakeDrive {
		d := q.drives[str("id")]
		if d == nil {
			c.Error("DeviceNotFound", fmt.Sprintf("Device '%s' not found", str("id")))
		}
		return d
	}
	switch cmd.Execute {
	case "cont":
		c.Return(struct{}{})
		if q.full != "" {
			q.diskFull(c)
		}
	case "query-status":
		c.Return(qmp.StatusInfo{Running: q.full == "", Status: map[bool]string{true: "running", false: "io-error"}[q.full == ""]})
	case "stop", "set_password", "expire_password":
		c.Return(struct{}{})
	case "system_reset":
		c.Return(struct{}{})
		c.Event(qmp.EventReset, qmp.ShutdownData{Reason: "host-qmp-system-reset"})
	case "query-hotpluggable-cpus":
		c.Return(q.slots)
	case "device_add":
		for i, s := range q.slots {
			if s.QOMPath == "" && cpuArgs(cmd.Arguments, s.Props) {
				q.slots[i].QOMPath = "/machine/peripheral/" + str("id")
				c.Return(struct{}{})
				return
			}
		}
		c.Error("GenericError", "no free CPU slot with these properties")
	case "device_del":
		for _, s := range q.slots {
			if s.QOMPath != "" && s.QOMPath == str("id") {
				q.ejects[s.QOMPath] = true // the guest's turn
				c.Return(struct{}{})
				return
			}
		}
		c.Error("DeviceNotFound", fmt.Sprintf("Device '%s' not found", str("id")))
	case "balloon":
		q.target = int64(cmd.Arguments["value"].(float64))
		c.Return(struct{}{})
	case "query-balloon":
		c.Return(map[string]int64{"actual": q.actual})
	case "query-block":
		var bs []qmp.BlockInfo
		for _, id := range slices.Sorted(maps.Keys(q.drives)) {
			d := q.drives[id]
			b := qmp.BlockInfo{Device: id + "-drive", QDev: id, Removable: true, Locked: d.locked, TrayOpen: &d.open}
			if d.medium != "" {
				b.Inserted = &qmp.BlockDeviceInfo{File: d.medium, ReadOnly: true, Driver: "raw"}
			}
			bs = append(bs, b)
		}
		c.Return(bs)
	case "blockdev-open-tray":
		if d := drive(); d != nil {
			c.Return(struct{}{})
			// A locked tray stays closed: the guest is asked to eject.
			if !d.open && (!d.locked || cmd.Arguments["force"] == true) {
				q.moveTray(c, str("id"), true)
			}
		}
	case "blockdev-close-tray":
		if d := drive(); d != nil {
			c.Return(struct{}{})
			if d.open {
				q.moveTray(c, str("id"), false)
			}
		}
	case "blockdev-remove-medium":
		if d := drive(); d != nil {
			if !d.open {
				c.Error("GenericError", fmt.Sprintf("Tray of device '%s' is not open", str("id")))
				return
			}
			d.medium = ""
			c.Return(struct{}{})
		}
	case "blockdev-change-medium":
		d := drive()
		switch {
		case d == nil:
		case !fileExists(str("filename")):
			c.Error("GenericError", fmt.Sprintf("Could not open '%s': No such file or directory", str("filename")))
		case !d.open && d.locked:
			c.Error("GenericError", fmt.Sprintf("Device '%s' is locked and force was not specified, wait for tray to open and try again", str("id")))
		default:
			if !d.open {
				q.moveTray(c, str("id"), true)
			}
			d.medium = str("filename")
			q.moveTray(c, str("id"), false)
			c.Return(struct{}{})
		}
	case "system_powerdown":
		c.Return(struct{}{})
		c.Event(qmp.EventPowerdown, nil)
		if !q.ignores {
			q.exit(c, true)
		}
	case "quit":
		if q.quitErr {
			c.Error("GenericError", "quit refused")
			return
		}
		c.Return(struct{}{})
		q.exit(c, false)
	default:
		c.Error("CommandNotFound", fmt.Sprintf("The command %s has not been found", cmd.Execute))
	}
}

// cpuArgs tells whether device_add's arguments name exactly the slot with
// props.
func cpuArgs(args map[string]any, props qmp.CPUProps) bool {
	b, _ := json.Marshal(props)
	var want map[string]any
	_ = json.Unmarshal(b, &want)
	for k, v := range want {
		if args[k] != v {
			return false
		}
	}
	return len(args) == len(want)+2 // and driver, id
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return p != "" && err == nil
}

func (q *fakeQemu) moveTray(c *qmptest.Conn, id string, open bool) {
	q.drives[id].open = open
	c.Event(qmp.EventDeviceTrayMoved, qmp.TrayMovedData{Device: id + "-drive", ID: id, TrayOpen: open})
}

// exit ends qemu as it ends after a shutdown: SHUTDOWN, the monitor's
// socket closes, the process exits 0.
func (q *fakeQemu) exit(c *qmptest.Conn, guest bool) {
	reason := "host-qmp-quit"
	if guest {
		reason = "guest-shutdown"
	}
	c.Event(qmp.EventShutdown, qmp.ShutdownData{Guest: guest, Reason: reason})
	c.Close()
	if err := syscall.Kill(q.proc.cmd.Process.Pid, syscall.SIGTERM); err != nil {
		q.t.Errorf("ending qemu's stand-in: %v", err)
	}
}

// The guest's part.

// ejectCPUs lets the CPUs asked to go go, as a guest does once it has
// offlined them.
func (q *fakeQemu) ejectCPUs() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, s := range q.slots {
		if q.ejects[s.QOMPath] {
			delete(q.ejects, s.QOMPath)
			q.slots[i].QOMPath = ""
			q.srv.Conn().Event(qmp.EventDeviceDeleted, qmp.DeviceDeletedData{Path: s.QOMPath})
		}
	}
}

// inflate lets the guest's balloon driver reach the target.
func (q *fakeQemu) inflate() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.actual = q.target
	q.srv.Conn().Event(qmp.EventBalloonChange, qmp.BalloonChangeData{Actual: q.actual})
}

// lockTray locks drive id's tray, as a guest does that mounts the CD.
func (q *fakeQemu) lockTray(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drives[id].locked = true
}

// ejectTray unlocks and opens drive id's tray, as a guest does that
// unmounted the CD after an eject request.
func (q *fakeQemu) ejectTray(id string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.drives[id].locked = false
	q.moveTray(q.srv.Conn(), id, true)
}

func (q *fakeQemu) drive(id string) fakeDrive {
	q.mu.Lock()
	defer q.mu.Unlock()
	return *q.drives[id]
}

func (q *fakeQemu) plugged() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, s := range q.slots {
		if s.QOMPath != "" {
			n++
		}
	}
	return n
}

// ignoreACPI makes the guest ignore the power button; quitFails makes quit
// fail.
// diskFull pauses the guest on a write of the full drive to its volume,
// as qemu does with werror=stop.
func (q *fakeQemu) diskFull(c *qmptest.Conn) {
	c.Event(qmp.EventBlockIOError, map[string]any{"device": "", "node-name": q.full, "operation": "write",
		"action": "stop", "nospace": true, "reason": "No space left on device"})
	c.Event(qmp.EventStop, nil)
}

// fill fills drive's volume, and the guest writes to it; free makes room.
func (q *fakeQemu) fill(drive string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.full = drive
	q.diskFull(q.srv.Conn())
}

// fillNext fills drive's volume while the guest is paused: it fails there
// on its next retry.
func (q *fakeQemu) fillNext(drive string) { q.mu.Lock(); q.full = drive; q.mu.Unlock() }

func (q *fakeQemu) free() { q.mu.Lock(); q.full = ""; q.mu.Unlock() }

func (q *fakeQemu) hang() { q.mu.Lock(); q.hangs = true; q.mu.Unlock() }

func (q *fakeQemu) ignoreACPI() { q.mu.Lock(); q.ignores = true; q.mu.Unlock() }
func (q *fakeQemu) quitFails()  { q.mu.Lock(); q.quitErr = true; q.mu.Unlock() }

// powerOff shuts the guest down by itself.
func (q *fakeQemu) powerOff() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.exit(q.srv.Conn(), true)
}

// powerOffSlowSocket shuts the guest down with the SHUTDOWN event
// arriving after the process has exited, which a busy machine can do.
func (q *fakeQemu) powerOffSlowSocket() {
	q.mu.Lock()
	defer q.mu.Unlock()
	require.NoError(q.t, syscall.Kill(q.proc.cmd.Process.Pid, syscall.SIGTERM))
	<-q.proc.done
	c := q.srv.Conn()
	c.Event(qmp.EventShutdown, qmp.ShutdownData{Guest: true, Reason: "guest-shutdown"})
	c.Close()
}

// recorder keeps what the runner reports, and lets a test wait for it.
type recorder struct {
	mu       sync.Mutex
	changed  chan struct{} // closed and replaced at each report
	statuses []Status
	events   []Event
	stopped  bool
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{})} }

func (r *recorder) Report(_ context.Context, s Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses = append(r.statuses, s)
	r.notify()
}

func (r *recorder) Event(_ context.Context, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.notify()
}

func (r *recorder) SetStopped(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	return nil
}

func (r *recorder) notify() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// wait blocks until ok, called with r locked, holds.
func (r *recorder) wait(t testing.TB, what string, ok func() bool) {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		r.mu.Lock()
		done, changed := ok(), r.changed
		r.mu.Unlock()
		if done {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("no %s within %s; events: %+v", what, waitTimeout, r.eventsOf(""))
		}
	}
}

// waitEvent waits for the n-th event (from 1) with reason and returns it.
func (r *recorder) waitEvent(t testing.TB, reason string, n int) Event {
	t.Helper()
	var e Event
	r.wait(t, fmt.Sprintf("event %s #%d", reason, n), func() bool {
		seen := 0
		for _, ev := range r.events {
			if ev.Reason == reason {
				if seen++; seen == n {
					e = ev
					return true
				}
			}
		}
		return false
	})
	return e
}

// waitStatus waits for a status that ok accepts and returns it.
func (r *recorder) waitStatus(t testing.TB, what string, ok func(Status) bool) Status {
	t.Helper()
	var s Status
	r.wait(t, "status with "+what, func() bool {
		if len(r.statuses) == 0 || !ok(r.statuses[len(r.statuses)-1]) {
			return false
		}
		s = r.statuses[len(r.statuses)-1]
		return true
	})
	return s
}

// reports is the number of statuses reported so far.
func (r *recorder) reports() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.statuses)
}

// eventsOf are the events with reason so far; all of them for "".
func (r *recorder) eventsOf(reason string) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, e := range r.events {
		if reason == "" || e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func (r *recorder) last() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.statuses[len(r.statuses)-1]
}

// testVM is a Runner on a fakeQemu, as launch leaves it.
type testVM struct {
	t      testing.TB
	dir    string
	r      *Runner
	q      *fakeQemu
	rec    *recorder
	log    *syncbuffer.Buffer
	ended  chan error
	cancel context.CancelFunc
}

// baseConfig is a VM with 4 CPU slots, 1 GiB of RAM and two CD drives.
func baseConfig(dir string) runnerconfig.Config {
	timeout := int64(30)
	return runnerconfig.Config{
		DataDir: filepath.Join(dir, "data"), RuntimeDir: filepath.Join(dir, "run"),
		VM: runnerconfig.VM{
			Name: "test", Firmware: "bios", PowerdownTimeout: &timeout,
			MaximumCPUs: 4, CurrentCPUs: 2,
			MaximumRAM: runnerconfig.Size{Bytes: 1 << 30}, CurrentRAM: runnerconfig.Size{Bytes: 1 << 30},
			Drives: []runnerconfig.Drive{
				{Type: runnerconfig.DriveRaw, File: filepath.Join(dir, "disk.img")},
				{Type: runnerconfig.DriveCDROM, File: filepath.Join(dir, "a.iso")},
				{Type: runnerconfig.DriveCDROM},
			},
		},
	}
}

// newTestVM attaches a Runner with config c to a fresh fakeQemu (booted
// with c's CPUs and its maximum RAM), as launch does: the current values
// are applied while qemu is paused.
func newTestVM(t testing.TB, c runnerconfig.Config) *testVM {
	t.Helper()
	dir := filepath.Dir(c.DataDir)
	for _, f := range []string{"a.iso", "b.iso"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte(f), 0o644))
	}
	v := &testVM{t: t, dir: dir, rec: newRecorder(), log: &syncbuffer.Buffer{}}
	v.writeConfig(c)
	r, err := New(Options{ConfigFile: filepath.Join(dir, "config.yaml"), Reporter: v.rec,
		Logger: slog.New(slog.NewTextHandler(v.log, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	require.NoError(t, err)
	v.r = r
	cds := 0
	for _, d := range r.config.VM.Drives {
		if d.Type == runnerconfig.DriveCDROM {
			cds++
		}
	}
	v.q = newFakeQemu(t, int(r.config.VM.MaximumCPUs), int(r.config.VM.CurrentCPUs), r.config.VM.MaximumRAM.Bytes, cds)
	r.qemu = v.q.proc
	r.machine = NewMachine(&r.config.VM, "uuid", r.config.VM.Accelerator == "kvm", Firmware{}, r.runtimeDir, func(string) bool { return false })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	mon, err := qmp.Dial(ctx, v.q.srv.Socket)
	require.NoError(t, err)
	t.Cleanup(func() {
		r.cleanup()
		if v.ended != nil {
			if err := <-v.ended; err != nil {
				t.Logf("loop: %v", err)
			}
		}
		if t.Failed() {
			t.Logf("runner log:\n%s", v.log.String())
		}
	})
	require.NoError(t, r.attach(ctx, mon))
	return v
}

// writeConfig replaces the config file as a ConfigMap volume does: a new
// file renamed over the old one.
func (v *testVM) writeConfig(c runnerconfig.Config) {
	b, err := json.Marshal(map[string]any{"/Runner": c})
	require.NoError(v.t, err)
	tmp := filepath.Join(v.dir, ".config.yaml.tmp")
	require.NoError(v.t, os.WriteFile(tmp, b, 0o644))
	require.NoError(v.t, os.Rename(tmp, filepath.Join(v.dir, "config.yaml")))
}

// reload writes c as the new config and waits until the loop has applied
// it (apply reports the status at its end).
func (v *testVM) reload(c runnerconfig.Config) {
	v.t.Helper()
	n := v.rec.reports()
	v.writeConfig(c)
	v.rec.wait(v.t, "report after the reload", func() bool { return len(v.rec.statuses) > n })
}

// run lets the guest run and starts the loop, as Run does after cont.
func (v *testVM) run() {
	v.t.Helper()
	watcher, err := v.r.watchConfig()
	require.NoError(v.t, err)
	events := v.r.mon.Events(context.Background())
	var ctx context.Context
	ctx, v.cancel = context.WithCancel(context.Background())
	v.r.running(ctx)
	v.ended = make(chan error, 1)
	go func() {
		defer watcher.Close()
		v.ended <- v.r.loop(ctx, events, watcher)
	}()
}

// sigterm asks the runner to stop the VM, as SIGTERM does.
func (v *testVM) sigterm() { v.cancel() }

// result waits for the loop's end and returns its error, the runner's exit.
func (v *testVM) result() error {
	v.t.Helper()
	select {
	case err := <-v.ended:
		v.ended = nil
		return err
	case <-time.After(waitTimeout):
		v.t.Fatalf("the loop did not end within %s", waitTimeout)
		return nil
	}
}
