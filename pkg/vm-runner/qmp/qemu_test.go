//go:build linux

package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/freeport"

	"github.com/vmop/vmop/pkg/vm-runner/qmp/qmptest"
	"github.com/vmop/vmop/test/harness/prereq"
)

const qemuBinary = "qemu-system-x86_64"

// qemuOpts varies the test VM.
type qemuOpts struct {
	noBalloon bool
	maxCPUs   int      // default 4
	extra     []string // more qemu arguments
}

// testQEMU is a qemu process started for a test.
type testQEMU struct {
	dir       string
	sock      string
	spicePort int
	log       string
	cmd       *exec.Cmd
	stopped   bool
}

// startQEMU starts a paused (-S) TCG VM without disks or display, with a
// balloon, an empty IDE CD drive (qdev id cd0) and SPICE with ticketing on.
// The process group is killed when the test ends, and by the kernel if the
// test binary dies.
func startQEMU(t testing.TB, o qemuOpts) *testQEMU {
	t.Helper()
	prereq.Commands(t, "qemu-system-x86", qemuBinary)
	bin, err := exec.LookPath(qemuBinary)
	if err != nil {
		t.Fatalf("%s not found (%v): run `make deps` to install qemu", qemuBinary, err)
	}
	if o.maxCPUs == 0 {
		o.maxCPUs = 4
	}
	q := &testQEMU{dir: qmptest.TempDir(t), spicePort: freeport.Get(t)}
	q.sock = filepath.Join(q.dir, "qmp.sock")
	q.log = filepath.Join(q.dir, "qemu.log")
	args := []string{"-S", "-nodefaults", "-display", "none",
		"-machine", "q35,accel=tcg", "-cpu", "qemu64",
		"-smp", "1,maxcpus=" + strconv.Itoa(o.maxCPUs), "-m", "256",
		"-qmp", "unix:" + q.sock + ",server=on,wait=off",
		"-drive", "if=none,id=cd0drive,media=cdrom,readonly=on",
		"-device", "ide-cd,drive=cd0drive,id=cd0",
		"-spice", fmt.Sprintf("port=%d,addr=127.0.0.1", q.spicePort),
	}
	if !o.noBalloon {
		args = append(args, "-device", "virtio-balloon-pci,id=balloon0")
	}
	args = append(args, o.extra...)
	logf, err := os.Create(q.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	q.cmd = exec.Command(bin, args...)
	q.cmd.Stdout, q.cmd.Stderr = logf, logf
	q.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := q.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", qemuBinary, err)
	}
	t.Cleanup(func() {
		q.stop()
		if t.Failed() {
			b, _ := os.ReadFile(q.log)
			t.Logf("qemu output:\n%s", b)
		}
	})
	return q
}

// stop kills qemu's process group and reaps it.
func (q *testQEMU) stop() {
	if q.stopped {
		return
	}
	q.stopped = true
	_ = syscall.Kill(-q.cmd.Process.Pid, syscall.SIGKILL)
	_ = q.cmd.Wait()
}

// dial connects to qemu's QMP socket; the connection is closed when the test ends.
func (q *testQEMU) dial(t testing.TB) *Monitor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := Dial(ctx, q.sock)
	if err != nil {
		b, _ := os.ReadFile(q.log)
		t.Fatalf("Dial: %v\nqemu output:\n%s", err, b)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// waitEvent reads ch until an event called name arrives.
func waitEvent(t *testing.T, ch <-chan Event, name string) Event {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed while waiting for %s", name)
			}
			if e.Name == name {
				return e
			}
		case <-timeout:
			t.Fatalf("no %s event within 10s", name)
		}
	}
}

func plugged(cpus []HotpluggableCPU) int {
	n := 0
	for _, c := range cpus {
		if c.Plugged() {
			n++
		}
	}
	return n
}

func findBlock(t *testing.T, m *Monitor, ctx context.Context, qdev string) BlockInfo {
	t.Helper()
	blocks, err := m.QueryBlock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.QDev == qdev {
			return b
		}
	}
	t.Fatalf("query-block has no %s: %+v", qdev, blocks)
	return BlockInfo{}
}

// wantClass returns the error's description.
func wantClass(t *testing.T, err error, class string) string {
	t.Helper()
	var qe *Error
	if !errors.As(err, &qe) {
		t.Fatalf("got %v (%T), want *Error with class %s", err, err, class)
	}
	if qe.Class != class {
		t.Errorf("got class %s (%q), want %s", qe.Class, qe.Desc, class)
	}
	return qe.Desc
}

// TestQEMU drives one VM through the runner's commands, in order.
func TestQEMU(t *testing.T) {
	q := startQEMU(t, qemuOpts{})
	m := q.dial(t)
	ctx := testCtx(t)
	ev := m.Events(ctx)
	t.Logf("qemu %s", m.Version())

	t.Run("status", func(t *testing.T) {
		st, err := m.QueryStatus(ctx)
		if err != nil || st.Running || st.Status != "prelaunch" {
			t.Errorf("QueryStatus = %+v, %v; want prelaunch", st, err)
		}
		kvm, err := m.QueryKVM(ctx)
		if err != nil || kvm.Enabled {
			t.Errorf("QueryKVM = %+v, %v; want disabled under TCG", kvm, err)
		}
	})

	t.Run("cont", func(t *testing.T) {
		if err := m.Cont(ctx); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, ev, EventResume)
		st, err := m.QueryStatus(ctx)
		if err != nil || !st.Running || st.Status != "running" {
			t.Errorf("QueryStatus = %+v, %v; want running", st, err)
		}
	})

	t.Run("cpu hotplug", func(t *testing.T) {
		cpus, err := m.QueryHotpluggableCPUs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cpus) != 4 || plugged(cpus) != 1 {
			t.Fatalf("want 4 slots, 1 plugged: %+v", cpus)
		}
		var free []HotpluggableCPU
		for _, c := range cpus {
			if !c.Plugged() {
				free = append(free, c)
			}
		}
		for i, c := range free[:2] {
			if err := m.AddCPU(ctx, c, fmt.Sprintf("cpu-%d", i+1)); err != nil {
				t.Fatalf("AddCPU %+v: %v", c.Props, err)
			}
		}
		cpus, err = m.QueryHotpluggableCPUs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := plugged(cpus); n != 3 {
			t.Errorf("%d CPUs plugged after adding two, want 3", n)
		}
		// The same slot again.
		t.Logf("re-plug: %s", wantClass(t, m.AddCPU(ctx, free[0], "cpu-9"), "GenericError"))
		// A firmware-only guest never ejects a CPU: qemu refuses or waits.
		if err := m.DeviceDel(ctx, "cpu-1"); err != nil {
			t.Logf("device_del cpu-1: %s", wantClass(t, err, "GenericError"))
		}
		wantClass(t, m.DeviceDel(ctx, "no-such-device"), "DeviceNotFound")
	})

	t.Run("balloon", func(t *testing.T) {
		if err := m.Balloon(ctx, 128<<20); err != nil {
			t.Fatal(err)
		}
		// Without a guest driver qemu still reports the full RAM.
		actual, err := m.QueryBalloon(ctx)
		if err != nil || actual <= 0 {
			t.Errorf("QueryBalloon = %d, %v", actual, err)
		}
	})

	t.Run("cdrom", func(t *testing.T) {
		iso := filepath.Join(q.dir, "cd.img")
		if err := os.WriteFile(iso, make([]byte, 4096), 0o444); err != nil {
			t.Fatal(err)
		}
		if b := findBlock(t, m, ctx, "cd0"); b.Inserted != nil {
			t.Fatalf("cd0 not empty at start: %+v", b.Inserted)
		}
		if err := m.BlockdevChangeMedium(ctx, "cd0", iso, "raw", true); err != nil {
			t.Fatal(err)
		}
		b := findBlock(t, m, ctx, "cd0")
		if b.Inserted == nil || b.Inserted.File != iso || !b.Inserted.ReadOnly {
			t.Fatalf("after change: %+v", b)
		}
		if b.TrayOpen == nil || *b.TrayOpen {
			t.Errorf("tray after change: %v, want closed", b.TrayOpen)
		}

		// blockdev-change-medium opens and closes the tray itself.
		for _, open := range []bool{true, false} {
			var d TrayMovedData
			if err := waitEvent(t, ev, EventDeviceTrayMoved).Decode(&d); err != nil || d.ID != "cd0" || d.TrayOpen != open {
				t.Errorf("tray event during change %+v, %v; want tray-open %v", d, err, open)
			}
		}

		if err := m.BlockdevOpenTray(ctx, "cd0", false); err != nil {
			t.Fatal(err)
		}
		var d TrayMovedData
		if err := waitEvent(t, ev, EventDeviceTrayMoved).Decode(&d); err != nil || d.ID != "cd0" || !d.TrayOpen {
			t.Errorf("open tray event %+v, %v", d, err)
		}
		if err := m.BlockdevRemoveMedium(ctx, "cd0"); err != nil {
			t.Fatal(err)
		}
		b = findBlock(t, m, ctx, "cd0")
		if b.Inserted != nil || b.TrayOpen == nil || !*b.TrayOpen {
			t.Errorf("after remove: %+v", b)
		}
		if err := m.BlockdevCloseTray(ctx, "cd0"); err != nil {
			t.Fatal(err)
		}
		d = TrayMovedData{}
		if err := waitEvent(t, ev, EventDeviceTrayMoved).Decode(&d); err != nil || d.TrayOpen {
			t.Errorf("close tray event %+v, %v", d, err)
		}
		err := m.BlockdevChangeMedium(ctx, "cd0", filepath.Join(q.dir, "missing.iso"), "raw", true)
		wantClass(t, err, "GenericError")
		wantClass(t, m.BlockdevOpenTray(ctx, "cd9", false), "DeviceNotFound")
	})

	t.Run("spice", func(t *testing.T) {
		sp, err := m.QuerySpice(ctx)
		if err != nil || !sp.Enabled || sp.Port != q.spicePort || sp.Auth != "spice" {
			t.Errorf("QuerySpice = %+v, %v", sp, err)
		}
		if err := m.SetPassword(ctx, "spice", "s3cret", ""); err != nil {
			t.Fatal(err)
		}
		if err := m.SetPassword(ctx, "spice", "other", "keep"); err != nil {
			t.Fatal(err)
		}
		for _, when := range []string{"+30", "now", "never"} {
			if err := m.ExpirePassword(ctx, "spice", when); err != nil {
				t.Errorf("ExpirePassword %s: %v", when, err)
			}
		}
		wantClass(t, m.SetPassword(ctx, "rdp", "x", ""), "GenericError")
	})

	t.Run("bad arguments", func(t *testing.T) {
		wantClass(t, m.Execute(ctx, "balloon", map[string]any{"value": "lots"}, nil), "GenericError")
		wantClass(t, m.Execute(ctx, "query-status", map[string]any{"x": 1}, nil), "GenericError")
		wantClass(t, m.Execute(ctx, "balloon", nil, nil), "GenericError")
		wantClass(t, m.Execute(ctx, "no-such-command", nil, nil), "CommandNotFound")
	})

	t.Run("reset", func(t *testing.T) {
		if err := m.SystemReset(ctx); err != nil {
			t.Fatal(err)
		}
		var d ShutdownData
		if err := waitEvent(t, ev, EventReset).Decode(&d); err != nil || d.Guest {
			t.Errorf("RESET data %+v, %v", d, err)
		}
	})

	t.Run("powerdown", func(t *testing.T) {
		if err := m.SystemPowerdown(ctx); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, ev, EventPowerdown)
	})

	t.Run("quit", func(t *testing.T) {
		if err := m.Quit(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-m.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed after quit")
		}
		var d ShutdownData
		if err := waitEvent(t, ev, EventShutdown).Decode(&d); err != nil || d.Guest || d.Reason != "host-qmp-quit" {
			t.Errorf("SHUTDOWN data %+v, %v", d, err)
		}
		for range ev {
		}
		if err := m.Cont(ctx); !errors.Is(err, ErrClosed) {
			t.Errorf("Cont after quit = %v, want ErrClosed", err)
		}
		if err := q.cmd.Wait(); err != nil {
			t.Errorf("qemu exit: %v", err)
		}
		q.stopped = true
	})
}

// rawQMP is a minimal QMP client on a second monitor, to see the error class
// qemu itself sends.
type rawQMP struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, sock string) *rawQMP {
	t.Helper()
	var conn net.Conn
	var err error
	for range 200 {
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawQMP{conn: conn, r: bufio.NewReader(conn)}
	if _, err := c.r.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	c.run(t, "qmp_capabilities", nil)
	return c
}

func (c *rawQMP) run(t *testing.T, cmd string, args any) (class, desc string) {
	t.Helper()
	b, _ := json.Marshal(request{Execute: cmd, Arguments: args})
	if _, err := c.conn.Write(b); err != nil {
		t.Fatal(err)
	}
	for {
		line, err := c.r.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Event string
			Error *struct{ Class, Desc string }
		}
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		if r.Event != "" {
			continue
		}
		if r.Error == nil {
			return "", ""
		}
		return r.Error.Class, r.Error.Desc
	}
}

// TestQEMUErrorClasses checks the class recovered from go-qemu's bare
// description against the class qemu sends, on a machine without a balloon.
func TestQEMUErrorClasses(t *testing.T) {
	dir := qmptest.TempDir(t)
	rawSock := filepath.Join(dir, "raw.sock")
	q := startQEMU(t, qemuOpts{noBalloon: true, extra: []string{"-qmp", "unix:" + rawSock + ",server=on,wait=off"}})
	m := q.dial(t)
	raw := dialRaw(t, rawSock)
	ctx := testCtx(t)

	t.Logf("balloon without device: %s", wantClass(t, m.Balloon(ctx, 128<<20), "DeviceNotActive"))

	cases := []struct {
		cmd  string
		args any
	}{
		{"balloon", map[string]any{"value": 1 << 27}},
		{"query-balloon", nil},
		{"balloon", map[string]any{"value": "x"}},
		{"balloon", nil},
		{"query-status", map[string]any{"x": 1}},
		{"no-such-command", nil},
		{"qmp_capabilities", nil},
		{"device_del", map[string]any{"id": "nope"}},
		{"blockdev-open-tray", map[string]any{"id": "nope"}},
		{"blockdev-open-tray", map[string]any{"id": "cd0drive"}},
		{"blockdev-change-medium", map[string]any{"id": "cd0", "filename": "/nonexistent"}},
		{"device_add", map[string]any{"driver": "no-such-driver"}},
		{"set_password", map[string]any{"protocol": "vnc", "password": "x"}},
		{"set_password", map[string]any{"protocol": "spice", "password": "x", "connected": "bogus"}},
	}
	for _, c := range cases {
		wantCls, wantDesc := raw.run(t, c.cmd, c.args)
		if wantCls == "" {
			t.Errorf("%s %v: qemu accepted it, want an error case", c.cmd, c.args)
			continue
		}
		err := m.Execute(ctx, c.cmd, c.args, nil)
		var qe *Error
		if !errors.As(err, &qe) {
			t.Errorf("%s: got %v, want *Error", c.cmd, err)
			continue
		}
		if qe.Class != wantCls || qe.Desc != wantDesc {
			t.Errorf("%s %v: got %s %q, qemu sent %s %q", c.cmd, c.args, qe.Class, qe.Desc, wantCls, wantDesc)
		}
	}
}

// TestQEMUEventsNotRead runs 1000 commands that each cause an event with no
// subscriber, then 1000 with a subscriber that never reads.
func TestQEMUEventsNotRead(t *testing.T) {
	q := startQEMU(t, qemuOpts{})
	m := q.dial(t)

	toggle := func(n int) time.Duration {
		start := time.Now()
		for i := range n {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			var err error
			if i%2 == 0 {
				err = m.Cont(ctx)
			} else {
				err = m.Stop(ctx)
			}
			cancel()
			if err != nil {
				t.Fatalf("command %d: %v", i, err)
			}
		}
		return time.Since(start)
	}
	d := toggle(1000)
	t.Logf("1000 cont/stop without subscribers: %v (%v each)", d, d/1000)

	slow := m.Events(testCtx(t))
	d = toggle(1000)
	t.Logf("1000 cont/stop with a subscriber that never reads: %v (%v each)", d, d/1000)

	// A fresh subscriber still gets events; by the time it sees this one,
	// everything before it has been fanned out.
	fresh := m.Events(testCtx(t))
	ctx := testCtx(t)
	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, fresh, EventResume)
	if len(slow) != EventBuffer {
		t.Fatalf("slow subscriber holds %d events, want %d", len(slow), EventBuffer)
	}
	var last Event
	for range EventBuffer {
		last = <-slow
	}
	if last.Name != EventResume {
		t.Errorf("newest buffered event %s, want the last RESUME", last.Name)
	}
}
