package qmp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/qmp/qmptest"
)

// dial connects to the fake at s; the connection is closed when the test
// ends.
func dial(t *testing.T, s *qmptest.Server) *Monitor {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	m, err := Dial(ctx, s.Socket)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func intp(i int) *int { return &i }

func TestFakeTypedCommands(t *testing.T) {
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		switch cmd.Execute {
		case "query-status":
			c.Send(`{"return": {"status": "paused", "singlestep": false, "running": false}}`)
		case "query-kvm":
			c.Send(`{"return": {"enabled": true, "present": true}}`)
		case "query-balloon":
			c.Send(`{"return": {"actual": 4294967296}}`)
		case "query-hotpluggable-cpus":
			c.Send(`{"return": [{"props": {"core-id": 1, "thread-id": 0, "socket-id": 0}, "vcpus-count": 1, "type": "qemu64-x86_64-cpu"},` +
				`{"props": {"core-id": 0, "thread-id": 0, "socket-id": 0}, "vcpus-count": 1, "qom-path": "/machine/unattached/device[0]", "type": "qemu64-x86_64-cpu"}]}`)
		case "query-block":
			c.Send(`{"return": [{"io-status": "ok", "device": "cd0drive", "locked": false, "removable": true, "inserted": {"ro": true, "drv": "raw", "node-name": "#block1", "file": "/x.iso"}, "qdev": "cd0", "tray_open": false, "type": "unknown"}]}`)
		case "query-spice":
			c.Send(`{"return": {"migrated": false, "enabled": true, "auth": "spice", "port": 5900, "host": "127.0.0.1", "channels": [{"host": "127.0.0.1", "port": "40000", "family": "ipv4", "connection-id": 7, "channel-type": 1, "channel-id": 0, "tls": false}], "mouse-mode": "server"}}`)
		default:
			c.Send(`{"return": {}}`)
		}
	})
	m := dial(t, s)
	ctx := testCtx(t)
	if m.Version() != "7.2.0" {
		t.Errorf("Version() = %q, want 7.2.0", m.Version())
	}

	st, err := m.QueryStatus(ctx)
	if err != nil || st != (StatusInfo{Running: false, Status: "paused"}) {
		t.Errorf("QueryStatus = %+v, %v", st, err)
	}
	kvm, err := m.QueryKVM(ctx)
	if err != nil || kvm != (KVMInfo{Enabled: true, Present: true}) {
		t.Errorf("QueryKVM = %+v, %v", kvm, err)
	}
	if n, err := m.QueryBalloon(ctx); err != nil || n != 4<<30 {
		t.Errorf("QueryBalloon = %d, %v", n, err)
	}
	cpus, err := m.QueryHotpluggableCPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []HotpluggableCPU{
		{Type: "qemu64-x86_64-cpu", VCPUsCount: 1, Props: CPUProps{SocketID: intp(0), CoreID: intp(1), ThreadID: intp(0)}},
		{Type: "qemu64-x86_64-cpu", VCPUsCount: 1, Props: CPUProps{SocketID: intp(0), CoreID: intp(0), ThreadID: intp(0)}, QOMPath: "/machine/unattached/device[0]"},
	}
	if !reflect.DeepEqual(cpus, want) {
		t.Errorf("QueryHotpluggableCPUs = %+v", cpus)
	}
	if cpus[0].Plugged() || !cpus[1].Plugged() {
		t.Errorf("Plugged() wrong for %+v", cpus)
	}
	blocks, err := m.QueryBlock(ctx)
	if err != nil || len(blocks) != 1 || blocks[0].QDev != "cd0" || blocks[0].Inserted == nil ||
		blocks[0].Inserted.File != "/x.iso" || !blocks[0].Inserted.ReadOnly || blocks[0].TrayOpen == nil || *blocks[0].TrayOpen {
		t.Errorf("QueryBlock = %+v, %v", blocks, err)
	}
	sp, err := m.QuerySpice(ctx)
	if err != nil || !sp.Enabled || sp.Port != 5900 || sp.Auth != "spice" || len(sp.Channels) != 1 || sp.Channels[0].ConnectionID != 7 {
		t.Errorf("QuerySpice = %+v, %v", sp, err)
	}

	before := len(s.Commands())
	for _, call := range []func() error{
		func() error { return m.Cont(ctx) },
		func() error { return m.Stop(ctx) },
		func() error { return m.SystemPowerdown(ctx) },
		func() error { return m.SystemReset(ctx) },
		func() error { return m.AddCPU(ctx, cpus[0], "cpu-1") },
		func() error {
			return m.AddCPU(ctx, HotpluggableCPU{Type: "t", Props: CPUProps{SocketID: intp(1), DieID: intp(0), CoreID: intp(2), ThreadID: intp(1)}}, "cpu-2")
		},
		func() error { return m.DeviceDel(ctx, "cpu-1") },
		func() error { return m.Balloon(ctx, 1<<31) },
		func() error { return m.BlockdevOpenTray(ctx, "cd0", true) },
		func() error { return m.BlockdevCloseTray(ctx, "cd0") },
		func() error { return m.BlockdevChangeMedium(ctx, "cd0", "/a b.iso", "raw", true) },
		func() error { return m.BlockdevChangeMedium(ctx, "cd0", "/c.img", "", false) },
		func() error { return m.BlockdevRemoveMedium(ctx, "cd0") },
		func() error { return m.SetPassword(ctx, "spice", "s3cr\"et", "") },
		func() error { return m.SetPassword(ctx, "spice", "x", "keep") },
		func() error { return m.ExpirePassword(ctx, "spice", "+30") },
		func() error { return m.Quit(ctx) },
	} {
		if err := call(); err != nil {
			t.Fatal(err)
		}
	}
	wantWire := []string{
		`{"execute":"cont"}`,
		`{"execute":"stop"}`,
		`{"execute":"system_powerdown"}`,
		`{"execute":"system_reset"}`,
		`{"execute":"device_add","arguments":{"driver":"qemu64-x86_64-cpu","id":"cpu-1","socket-id":0,"core-id":1,"thread-id":0}}`,
		`{"execute":"device_add","arguments":{"driver":"t","id":"cpu-2","socket-id":1,"die-id":0,"core-id":2,"thread-id":1}}`,
		`{"execute":"device_del","arguments":{"id":"cpu-1"}}`,
		`{"execute":"balloon","arguments":{"value":2147483648}}`,
		`{"execute":"blockdev-open-tray","arguments":{"force":true,"id":"cd0"}}`,
		`{"execute":"blockdev-close-tray","arguments":{"id":"cd0"}}`,
		`{"execute":"blockdev-change-medium","arguments":{"filename":"/a b.iso","format":"raw","id":"cd0","read-only-mode":"read-only"}}`,
		`{"execute":"blockdev-change-medium","arguments":{"filename":"/c.img","id":"cd0"}}`,
		`{"execute":"blockdev-remove-medium","arguments":{"id":"cd0"}}`,
		`{"execute":"set_password","arguments":{"password":"s3cr\"et","protocol":"spice"}}`,
		`{"execute":"set_password","arguments":{"connected":"keep","password":"x","protocol":"spice"}}`,
		`{"execute":"expire_password","arguments":{"protocol":"spice","time":"+30"}}`,
		`{"execute":"quit"}`,
	}
	var got []string
	for _, c := range s.Commands()[before:] {
		got = append(got, string(c.Raw))
	}
	if !reflect.DeepEqual(got, wantWire) {
		t.Errorf("commands on the wire:\n- want: %q\n-  got: %q", wantWire, got)
	}
}

func TestFakeExecuteRaw(t *testing.T) {
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		switch cmd.Execute {
		case "echo":
			c.Return(cmd.Arguments)
		case "no-return":
			c.Send(`{"id": "x"}`)
		case "bad-error":
			c.Send(`{"error": "not an object"}`)
		default:
			c.Send(`{"return": {}}`)
		}
	})
	m := dial(t, s)
	ctx := testCtx(t)

	var out struct {
		A int    `json:"a"`
		B string `json:"b"`
	}
	if err := m.Execute(ctx, "echo", map[string]any{"a": 1, "b": "x"}, &out); err != nil || out.A != 1 || out.B != "x" {
		t.Errorf("echo = %+v, %v", out, err)
	}
	var wrong []string
	if err := m.Execute(ctx, "echo", map[string]any{"a": 1}, &wrong); err == nil {
		t.Error("decoding an object into a slice: want an error")
	}
	if err := m.Execute(ctx, "no-return", nil, &out); err == nil {
		t.Error("reply without return: want an error")
	}
	if err := m.Execute(ctx, "x", func() {}, nil); err == nil {
		t.Error("unmarshallable arguments: want an error")
	}
	err := m.Execute(ctx, "bad-error", nil, nil)
	if err == nil || errors.Is(err, ErrClosed) {
		t.Errorf("malformed error member: got %v, want a protocol error", err)
	}
	// The connection survives all of the above.
	if err := m.Execute(ctx, "ok", nil, nil); err != nil {
		t.Errorf("after errors: %v", err)
	}
}

func TestFakeErrorClasses(t *testing.T) {
	// Replies as qemu 7.2 sends them; Class must survive go-qemu.
	cases := []struct{ class, desc string }{
		{"GenericError", "Parameter 'value' is missing"},
		{"GenericError", "Invalid parameter type for 'value', expected: integer"},
		{"GenericError", "acpi: device unplug request for not supported device type: qemu64-x86_64-cpu"},
		{"GenericError", "Device 'cd0' is locked and force was not specified, wait for tray to open and try again"},
		{"GenericError", "Device 'x' not found (really)"},
		{"CommandNotFound", "The command nosuch has not been found"},
		{"CommandNotFound", "Capabilities negotiation is already complete, command ignored"},
		{"CommandNotFound", "Expecting capabilities negotiation with 'qmp_capabilities'"},
		{"DeviceNotActive", "No balloon device has been activated"},
		{"DeviceNotFound", "Device 'nope' not found"},
		{"DeviceNotFound", "Instance 'x' not found"},
		{"KVMMissingCap", "Using KVM without synchronous MMU, balloon unavailable"},
	}
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		c.Error(cmd.Arguments["class"].(string), cmd.Arguments["desc"].(string))
	})
	m := dial(t, s)
	ctx := testCtx(t)
	for _, c := range cases {
		err := m.Execute(ctx, "fail", map[string]any{"class": c.class, "desc": c.desc}, nil)
		var qe *Error
		if !errors.As(err, &qe) {
			t.Errorf("%q: got %v (%T), want *Error", c.desc, err, err)
			continue
		}
		if qe.Class != c.class || qe.Desc != c.desc {
			t.Errorf("got %+v, want class %s desc %q", *qe, c.class, c.desc)
		}
		if want := "qmp: " + c.class + ": " + c.desc; qe.Error() != want {
			t.Errorf("Error() = %q, want %q", qe.Error(), want)
		}
	}
	// go-qemu passes on only the description: a class qemu would not use
	// for that message cannot be recovered.
	err := m.Execute(ctx, "fail", map[string]any{"class": "DeviceNotActive", "desc": "something else"}, nil)
	var qe *Error
	if !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Errorf("unknown message: got %v, want GenericError", err)
	}
}

func TestFakeEventsInterleaved(t *testing.T) {
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		switch cmd.Execute {
		case "stop":
			// Events before and after the reply, as qemu interleaves them.
			c.Send(`{"timestamp": {"seconds": 1700000000, "microseconds": 250000}, "event": "STOP"}`,
				`{"return": {}}`,
				`{"timestamp": {"seconds": 1700000001, "microseconds": 0}, "event": "SHUTDOWN", "data": {"guest": true, "reason": "guest-shutdown"}}`)
		case "tray":
			c.Send(`{"timestamp": {"seconds": 1700000002, "microseconds": 1}, "event": "DEVICE_TRAY_MOVED", "data": {"device": "", "tray-open": true, "id": "cd0"}}`,
				`{"error": {"class": "GenericError", "desc": "boom"}}`)
		default:
			c.Send(`{"return": {}}`)
		}
	})
	m := dial(t, s)
	ctx := testCtx(t)
	a := m.Events(ctx)
	b := m.Events(ctx)

	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var qe *Error
	if err := m.Execute(ctx, "tray", nil, nil); !errors.As(err, &qe) || qe.Desc != "boom" {
		t.Fatalf("tray: %v", err)
	}
	// Unsolicited events between commands.
	for i := range 20 {
		s.Conn().Send(fmt.Sprintf(`{"timestamp": {"seconds": %d, "microseconds": 0}, "event": "BALLOON_CHANGE", "data": {"actual": %d}}`, 1700000100+i, int64(i)<<30))
	}
	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}

	for name, ch := range map[string]<-chan Event{"a": a, "b": b} {
		e := recv(t, ch)
		if e.Name != EventStop || !e.Time.Equal(time.Unix(1700000000, 250000000)) {
			t.Errorf("%s: first event %+v", name, e)
		}
		e = recv(t, ch)
		var sd ShutdownData
		if err := e.Decode(&sd); err != nil || e.Name != EventShutdown || sd != (ShutdownData{Guest: true, Reason: "guest-shutdown"}) {
			t.Errorf("%s: second event %+v %+v %v", name, e, sd, err)
		}
		e = recv(t, ch)
		var td TrayMovedData
		if err := e.Decode(&td); err != nil || e.Name != EventDeviceTrayMoved || td != (TrayMovedData{ID: "cd0", TrayOpen: true}) {
			t.Errorf("%s: third event %+v %+v %v", name, e, td, err)
		}
		for i := range 20 {
			e = recv(t, ch)
			var bd BalloonChangeData
			if err := e.Decode(&bd); err != nil || e.Name != EventBalloonChange || bd.Actual != int64(i)<<30 {
				t.Errorf("%s: balloon event %d: %+v %v", name, i, e, err)
			}
		}
	}

	// A late subscriber sees only what comes after it subscribed.
	late := m.Events(ctx)
	s.Conn().Send(`{"timestamp": {"seconds": 1, "microseconds": 0}, "event": "RESUME"}`)
	if e := recv(t, late); e.Name != EventResume {
		t.Errorf("late subscriber got %+v first", e)
	}
}

func recv(t *testing.T, ch <-chan Event) Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("event channel closed")
		}
		return e
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5s")
	}
	return Event{}
}

func TestFakeSlowSubscriberDropsOldest(t *testing.T) {
	const n = EventBuffer + 50
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		if cmd.Execute == "burst" {
			for i := range n {
				c.Send(fmt.Sprintf(`{"event": "SEQ", "data": {"i": %d}, "timestamp": {"seconds": 1, "microseconds": 0}}`, i))
			}
			c.Send(`{"event": "MARK", "timestamp": {"seconds": 1, "microseconds": 0}}`)
		}
		c.Send(`{"return": {}}`)
	})
	m := dial(t, s)
	ctx := testCtx(t)
	slow := m.Events(ctx)
	fast := m.Events(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range fast {
			if e.Name == "MARK" {
				return
			}
		}
	}()
	start := time.Now()
	if err := m.Execute(ctx, "burst", nil, nil); err != nil {
		t.Fatal(err)
	}
	<-done
	t.Logf("%d events fanned out to 2 subscribers in %v", n+1, time.Since(start))
	if len(slow) != EventBuffer {
		t.Fatalf("slow subscriber holds %d events, want %d", len(slow), EventBuffer)
	}
	// Oldest dropped: the buffer holds the newest events, ending with MARK.
	first := <-slow
	if got, want := first.Data["i"], float64(n+1-EventBuffer); got != want {
		t.Errorf("oldest kept event i=%v, want %v", got, want)
	}
	var last Event
	for range EventBuffer - 1 {
		last = <-slow
	}
	if last.Name != "MARK" {
		t.Errorf("newest kept event %+v, want MARK", last)
	}
}

func TestFakeEventsUnsubscribeAndClose(t *testing.T) {
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) { c.Send(`{"return": {}}`) })
	m := dial(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	ch := m.Events(ctx)
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("event after unsubscribe")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("channel not closed after ctx cancel")
	}

	kept := m.Events(context.Background())
	if err := m.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	select {
	case <-m.Done():
	default:
		t.Error("Done not closed after Close")
	}
	if _, ok := <-kept; ok {
		t.Error("subscriber channel open after Close")
	}
	if _, ok := <-m.Events(context.Background()); ok {
		t.Error("Events after Close: want a closed channel")
	}
	if err := m.Cont(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Cont after Close = %v, want ErrClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestFakeCloseMidCommand(t *testing.T) {
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		if cmd.Execute == "query-status" {
			// qemu dies while the command runs: an event, then nothing.
			c.Send(`{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 0}}`)
			c.Close()
			return
		}
		c.Send(`{"return": {}}`)
	})
	m := dial(t, s)
	ev := m.Events(context.Background())
	ctx := testCtx(t)
	if err := m.Cont(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := m.QueryStatus(ctx)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("QueryStatus on a dying qemu = %v, want ErrClosed", err)
	}
	t.Logf("error after %v: %v", time.Since(start), err)
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after qemu closed the socket")
	}
	// Events received before the end are still delivered, then the channel closes.
	if e := recv(t, ev); e.Name != EventStop {
		t.Errorf("got %+v, want STOP", e)
	}
	if _, ok := <-ev; ok {
		t.Error("subscriber channel open after the connection ended")
	}
	if err := m.Cont(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Cont after the end = %v, want ErrClosed", err)
	}
}

func TestFakeIdleCloseClosesDone(t *testing.T) {
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) { c.Send(`{"return": {}}`) })
	m := dial(t, s)
	s.Conn().Send(`{"event": "SHUTDOWN", "data": {"guest": false, "reason": "host-signal"}, "timestamp": {"seconds": 1, "microseconds": 0}}`)
	s.Conn().Close()
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after qemu closed the socket")
	}
}

func TestFakeExecuteHonoursContext(t *testing.T) {
	hold := make(chan struct{})
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		switch cmd.Execute {
		case "slow":
			// Reply only when the test says so, long after the caller gave up.
			go func() {
				<-hold
				c.Send(`{"return": {"who": "slow"}}`)
			}()
		default:
			c.Return(map[string]any{"who": cmd.Execute})
		}
	})
	m := dial(t, s)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := m.Execute(ctx, "slow", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Execute = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Execute returned after %v", d)
	}
	// go-qemu runs one command at a time: the next one waits for the
	// abandoned reply, so it times out too.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	if err := m.Execute(ctx2, "next", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second Execute = %v, want DeadlineExceeded", err)
	}
	// Once the late reply arrives, it goes to the abandoned call and replies
	// stay matched to their commands.
	close(hold)
	var who struct{ Who string }
	if err := m.Execute(testCtx(t), "third", nil, &who); err != nil || who.Who != "third" {
		t.Errorf("third = %+v, %v", who, err)
	}
	already, cancel3 := context.WithCancel(context.Background())
	cancel3()
	if err := m.Execute(already, "x", nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
}

func TestFakeOversizedReplyEndsConnection(t *testing.T) {
	// go-qemu reads lines with bufio.Scanner (64 KiB limit): a larger reply
	// fails the command and stops its reader for good.
	s := qmptest.NewServer(t, func(c *qmptest.Conn, cmd qmptest.Command) {
		if cmd.Execute == "big" {
			c.Send(`{"return": "` + strings.Repeat("x", 70<<10) + `"}`)
			return
		}
		c.Send(`{"return": {}}`)
	})
	m := dial(t, s)
	ctx := testCtx(t)
	err := m.Execute(ctx, "big", nil, nil)
	if !errors.Is(err, ErrClosed) {
		t.Fatalf("big reply = %v, want ErrClosed", err)
	}
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after the reader stopped")
	}
}

func TestFakeDialRetries(t *testing.T) {
	s := qmptest.NewUnstartedServer(t, func(c *qmptest.Conn, cmd qmptest.Command) { c.Send(`{"return": {}}`) })
	// A stale socket file from an earlier qemu refuses connections.
	stale, err := net.Listen("unix", s.Socket)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	type res struct {
		m   *Monitor
		err error
	}
	out := make(chan res, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		m, err := Dial(ctx, s.Socket)
		out <- res{m, err}
	}()
	time.Sleep(150 * time.Millisecond)
	os.Remove(s.Socket)
	time.Sleep(100 * time.Millisecond)
	s.Start()
	r := <-out
	if r.err != nil {
		t.Fatalf("Dial: %v", r.err)
	}
	defer r.m.Close()
	if err := r.m.Cont(testCtx(t)); err != nil {
		t.Error(err)
	}
}

func TestFakeDialFailures(t *testing.T) {
	t.Run("no socket", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := Dial(ctx, filepath.Join(qmptest.TempDir(t), "none.sock"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Dial = %v, want DeadlineExceeded", err)
		}
	})
	t.Run("not a socket", func(t *testing.T) {
		p := filepath.Join(qmptest.TempDir(t), "file")
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		start := time.Now()
		_, err := Dial(ctx, p)
		if err == nil || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > time.Second {
			t.Errorf("Dial = %v after %v, want a prompt dial error", err, time.Since(start))
		}
	})
	t.Run("no greeting", func(t *testing.T) {
		s := qmptest.NewUnstartedServer(t, nil)
		s.NoGreeting = true
		s.Start()
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		start := time.Now()
		_, err := Dial(ctx, s.Socket)
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
			t.Errorf("Dial = %v after %v, want DeadlineExceeded", err, time.Since(start))
		}
	})
	t.Run("capabilities refused", func(t *testing.T) {
		s := qmptest.NewUnstartedServer(t, nil)
		s.CapabilitiesReply = `{"error": {"class": "GenericError", "desc": "nope"}}`
		s.Start()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := Dial(ctx, s.Socket)
		if err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("Dial = %v, want the handshake error", err)
		}
	})
}
