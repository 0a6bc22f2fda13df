package testguest

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/prereq"
)

// Generous: TCG on a loaded two-core CI machine.
const bootTimeout = 60 * time.Second

func TestGuest(t *testing.T) {
	g := Build(t)
	t.Run("accel=kvm:tcg", func(t *testing.T) {
		prereq.KVM(t) // accel=tcg covers the guest without it
		t.Parallel()
		testHotplugAndPowerdown(t, g, Accel())
	})
	t.Run("accel=tcg", func(t *testing.T) {
		t.Parallel()
		testHotplugAndPowerdown(t, g, "tcg")
	})
	t.Run("dhcp", func(t *testing.T) {
		// slirp's DHCP server stands in for a pod network's (restricted,
		// it offers no router).
		t.Parallel()
		vm := startVM(t, g.WithAppend(DHCP), Accel(), "-netdev", "user,id=n,restrict=on", "-device", "virtio-net-pci,netdev=n")
		want := DHCPLine + "10.0.2.15/24 router  mtu"
		vm.waitConsole(t, bootTimeout, func(lines []string) bool {
			return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, want) })
		}, want)
		vm.waitConsole(t, bootTimeout, func(lines []string) bool {
			return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, EchoLine) })
		}, EchoLine)
	})
	t.Run("records", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		var args []string
		for i, name := range []string{"first.img", "records.img"} {
			f := filepath.Join(dir, name)
			if err := os.WriteFile(f, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, 1<<20); err != nil {
				t.Fatal(err)
			}
			args = append(args, "-drive", fmt.Sprintf("if=none,id=d%d,format=raw,file=%s", i, f), "-device", fmt.Sprintf("virtio-blk-pci,drive=d%d", i))
		}
		const n = 16 // 1 MiB
		vm := startVM(t, g.WithAppend(Records(n)), Accel(), args...)
		vm.waitConsole(t, bootTimeout, func(lines []string) bool {
			return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, RecordsDoneLine) })
		}, RecordsDoneLine)
		out, _ := os.ReadFile(vm.console)
		if got := AckedRecords(string(out)); got != n {
			t.Fatalf("%d records acknowledged, want %d", got, n)
		}
		disk, err := os.OpenFile(filepath.Join(dir, "records.img"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer disk.Close()
		if lost, err := LostRecords(disk, n); err != nil || len(lost) > 0 {
			t.Fatalf("records not on the disk: %v (%v)", lost, err)
		}

		// Booted again, with record 9 gone: the guest says so, by going
		// on from there, and writes the rest again.
		_ = vm.qmp.exec("quit", nil, nil) // qemu may close before replying
		vm.waitExit(t, 10*time.Second)
		if _, err := disk.WriteAt(make([]byte, RecordSize), 8*RecordSize); err != nil {
			t.Fatal(err)
		}
		vm = startVM(t, g.WithAppend(Records(n), RecordPause(10*time.Millisecond)), Accel(), args...)
		vm.waitConsole(t, bootTimeout, func(lines []string) bool {
			return slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, RecordsDoneLine) })
		}, RecordsDoneLine)
		out, _ = os.ReadFile(vm.console)
		if !regexp.MustCompile(`(?m)^`+ResumePrefix+`9\r?$`).Match(out) || regexp.MustCompile(`(?m)^`+RecordPrefix+`8\r?$`).Match(out) {
			t.Fatalf("the guest did not go on from record 9:\n%s", out)
		}
		if lost, err := LostRecords(disk, n); err != nil || len(lost) > 0 {
			t.Fatalf("records not on the disk: %v (%v)", lost, err)
		}
	})
	t.Run("ignore_acpi", func(t *testing.T) {
		t.Parallel()
		vm := startVM(t, g.WithAppend(IgnoreACPI), Accel())
		vm.waitReady(t)
		if err := vm.qmp.exec("system_powerdown", nil, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := vm.qmp.waitEvent("POWERDOWN", nil, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		select {
		case <-vm.exited:
			t.Fatalf("qemu exited after system_powerdown: %v", vm.exitErr)
		case <-time.After(5 * time.Second):
		}
		_ = vm.qmp.exec("quit", nil, nil) // qemu may close before replying
		vm.waitExit(t, 10*time.Second)
	})
}

func testHotplugAndPowerdown(t *testing.T, g Guest, accel string) {
	vm := startVM(t, g, accel)
	boot := vm.waitReady(t)
	t.Logf("boot to %s: %v", ReadyLine, boot.Round(time.Millisecond))
	vm.waitCPUs(t, 1, time.Second)

	// Plug two CPUs into free slots.
	var slots []cpuSlot
	if err := vm.qmp.exec("query-hotpluggable-cpus", nil, &slots); err != nil {
		t.Fatal(err)
	}
	// Lowest free slots first, as qemu's TCG APIC stops delivering
	// logical-mode IPIs at the first unused APIC ID: a CPU plugged above a
	// hole stalls the guest (see the package documentation).
	slices.SortFunc(slots, func(a, b cpuSlot) int { return slices.Compare(a.key(), b.key()) })
	var ids []string
	start := time.Now()
	for _, s := range slots {
		if s.QOMPath != "" || len(ids) == 2 {
			continue
		}
		id := fmt.Sprintf("cpu%d", len(ids)+1)
		args := map[string]any{"driver": s.Type, "id": id}
		for k, v := range s.Props {
			args[k] = v
		}
		if err := vm.qmp.exec("device_add", args, nil); err != nil {
			t.Fatalf("device_add %v: %v", args, err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 2 {
		t.Fatalf("free CPU slots: %d, want 2: %+v", len(ids), slots)
	}
	if n := vm.qemuCPUs(t); n != 3 {
		t.Fatalf("query-cpus-fast: %d CPUs after device_add, want 3", n)
	}
	vm.waitCPUs(t, 3, 20*time.Second)
	t.Logf("plug: guest onlined 2 CPUs %v after device_add", time.Since(start).Round(time.Millisecond))

	// Unplug the last one (no hole, as above): the guest must eject it on
	// the ACPI request.
	start = time.Now()
	if err := vm.qmp.exec("device_del", map[string]any{"id": ids[1]}, nil); err != nil {
		t.Fatal(err)
	}
	// qemu 7.2 under TCG sends DEVICE_DELETED only for the CPU's child
	// /machine/peripheral/<id>/lapic, not for <id> itself; accept both.
	path := "/machine/peripheral/" + ids[1]
	ev, err := vm.qmp.waitEvent("DEVICE_DELETED", func(data map[string]any) bool {
		p, _ := data["path"].(string)
		return data["device"] == ids[1] || p == path || strings.HasPrefix(p, path+"/")
	}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("unplug: DEVICE_DELETED %v %v after device_del", ev, time.Since(start).Round(time.Millisecond))
	for n := vm.qemuCPUs(t); n != 2; n = vm.qemuCPUs(t) {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("query-cpus-fast: %d CPUs after DEVICE_DELETED, want 2", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	vm.waitCPUs(t, 2, 5*time.Second)
	t.Logf("unplug: guest down to 2 CPUs %v after device_del", time.Since(start).Round(time.Millisecond))

	start = time.Now()
	if err := vm.qmp.exec("system_powerdown", nil, nil); err != nil {
		t.Fatal(err)
	}
	vm.waitExit(t, 20*time.Second)
	t.Logf("system_powerdown to qemu exit: %v", time.Since(start).Round(time.Millisecond))
	if vm.exitErr != nil {
		t.Errorf("qemu: %v", vm.exitErr)
	}
	if out, _ := os.ReadFile(vm.console); !bytes.Contains(out, []byte("TESTGUEST POWEROFF")) {
		t.Errorf("console lacks TESTGUEST POWEROFF (acpid's handler):\n%s", out)
	}
	ev, err = vm.qmp.waitEvent("SHUTDOWN", nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ev["guest"] != true {
		t.Errorf("SHUTDOWN %v, want guest: true", ev)
	}
}

// cpuSlot is an entry of query-hotpluggable-cpus.
type cpuSlot struct {
	Type    string         `json:"type"`
	Props   map[string]any `json:"props"`
	QOMPath string         `json:"qom-path"`
}

func (s cpuSlot) key() []float64 {
	var k []float64
	for _, p := range []string{"node-id", "socket-id", "die-id", "cluster-id", "core-id", "thread-id"} {
		n, _ := s.Props[p].(float64)
		k = append(k, n)
	}
	return k
}

type vm struct {
	console string
	stderr  bytes.Buffer
	qmp     *qmpClient
	started time.Time
	exited  chan struct{}
	exitErr error
}

func startVM(t *testing.T, g Guest, accel string, qemuArgs ...string) *vm {
	t.Helper()
	// A unix socket path must fit in 108 bytes; t.TempDir() may not.
	sockDir, err := os.MkdirTemp("", "tg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "qmp")
	v := &vm{console: filepath.Join(t.TempDir(), "console.log"), exited: make(chan struct{})}
	args := []string{
		"-nodefaults", "-display", "none", "-no-reboot",
		"-machine", "q35,accel=" + accel, "-cpu", "max",
		"-smp", "1,maxcpus=4", "-m", "256",
		"-serial", "file:" + v.console,
		"-qmp", "unix:" + sock + ",server=on,wait=off",
	}
	args = append(args, qemuArgs...)
	cmd := exec.Command("qemu-system-x86_64", append(args, g.QemuArgs()...)...)
	cmd.Stdout = &v.stderr
	cmd.Stderr = &v.stderr
	v.started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		v.exitErr = cmd.Wait()
		close(v.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-v.exited:
		default:
			_ = cmd.Process.Kill()
			<-v.exited
		}
		if t.Failed() {
			out, _ := os.ReadFile(v.console)
			t.Logf("qemu %s\noutput:\n%s\nconsole:\n%s", strings.Join(cmd.Args, " "), v.stderr.String(), out)
		}
	})
	v.qmp, err = dialQMP(sock, v.exited)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.qmp.close)
	return v
}

// waitReady returns the time from starting qemu to the guest's ready line.
func (v *vm) waitReady(t *testing.T) time.Duration {
	t.Helper()
	v.waitConsole(t, bootTimeout, func(lines []string) bool {
		for _, l := range lines {
			if strings.Contains(l, ReadyLine) {
				return true
			}
		}
		return false
	}, ReadyLine)
	return time.Since(v.started)
}

// waitCPUs waits until the guest's last CPU count line says n.
func (v *vm) waitCPUs(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	v.waitConsole(t, timeout, func(lines []string) bool {
		for i := len(lines) - 1; i >= 0; i-- {
			if _, s, ok := strings.Cut(lines[i], CPUsPrefix); ok {
				got, _ := strconv.Atoi(strings.TrimSpace(s))
				return got == n
			}
		}
		return false
	}, CPUsPrefix+strconv.Itoa(n))
}

func (v *vm) waitConsole(t *testing.T, timeout time.Duration, done func([]string) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, _ := os.ReadFile(v.console)
		if done(strings.Split(string(out), "\n")) {
			return
		}
		select {
		case <-v.exited:
			t.Fatalf("qemu exited waiting for %q: %v", what, v.exitErr)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q on the console after %v", what, timeout)
		}
	}
}

func (v *vm) qemuCPUs(t *testing.T) int {
	t.Helper()
	var cpus []json.RawMessage
	if err := v.qmp.exec("query-cpus-fast", nil, &cpus); err != nil {
		t.Fatal(err)
	}
	return len(cpus)
}

func (v *vm) waitExit(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-v.exited:
	case <-time.After(timeout):
		t.Fatalf("qemu still running %v later", timeout)
	}
}

// qmpClient is the least QMP needed here: one command at a time, events
// queued until waited for.
type qmpClient struct {
	conn    net.Conn
	mu      sync.Mutex // one command at a time
	replies chan qmpMsg
	events  chan qmpMsg
}

type qmpMsg struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string         `json:"event"`
	Data  map[string]any `json:"data"`
}

func dialQMP(sock string, exited <-chan struct{}) (*qmpClient, error) {
	var conn net.Conn
	for deadline := time.Now().Add(10 * time.Second); ; {
		var err error
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		select {
		case <-exited:
			return nil, errors.New("qemu exited before its QMP socket was up")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("QMP: %w", err)
		}
	}
	q := &qmpClient{conn: conn, replies: make(chan qmpMsg, 1), events: make(chan qmpMsg, 256)}
	r := bufio.NewReader(conn)
	if _, err := r.ReadBytes('\n'); err != nil { // greeting
		conn.Close()
		return nil, fmt.Errorf("QMP greeting: %w", err)
	}
	go q.read(r)
	if err := q.exec("qmp_capabilities", nil, nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

func (q *qmpClient) read(r *bufio.Reader) {
	defer close(q.replies)
	defer close(q.events)
	dec := json.NewDecoder(r)
	for {
		var m qmpMsg
		if err := dec.Decode(&m); err != nil {
			return
		}
		if m.Event != "" {
			select {
			case q.events <- m:
			default: // nobody waits for that many
			}
			continue
		}
		q.replies <- m
	}
}

func (q *qmpClient) exec(cmd string, args, out any) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, _ := json.Marshal(req)
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: %w", cmd, err)
	}
	select {
	case m, ok := <-q.replies:
		if !ok {
			return fmt.Errorf("%s: QMP connection closed", cmd)
		}
		if m.Error != nil {
			return fmt.Errorf("%s: %s: %s", cmd, m.Error.Class, m.Error.Desc)
		}
		if out != nil {
			return json.Unmarshal(m.Return, out)
		}
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s: no reply", cmd)
	}
}

// waitEvent returns the data of the next event called name that match
// accepts (any, when nil); earlier events are dropped.
func (q *qmpClient) waitEvent(name string, match func(map[string]any) bool, timeout time.Duration) (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		select {
		case m, ok := <-q.events:
			if !ok {
				return nil, fmt.Errorf("QMP closed before event %s", name)
			}
			if m.Event == name && (match == nil || match(m.Data)) {
				return m.Data, nil
			}
		case <-ctx.Done():
			return nil, fmt.Errorf("no event %s within %v", name, timeout)
		}
	}
}

func (q *qmpClient) close() { q.conn.Close() }

func TestCPIOWriter(t *testing.T) {
	var buf bytes.Buffer
	w := newCPIOWriter(&buf)
	w.Dir("bin")
	w.File("bin/x", 0o755, []byte("hello"))
	w.Symlink("bin/sh", "x")
	w.CharDev("console", 0o600, 5, 1)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if buf.Len()%4 != 0 {
		t.Errorf("archive length %d not 4-byte aligned", buf.Len())
	}
	// busybox, a required dependency, reads the archive back.
	cmd := exec.Command(busybox, "cpio", "-tv")
	cmd.Stdin = &buf
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("busybox cpio: %v: %s", err, out)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		if len(f) >= 6 {
			// mode, size and name; date and owner do not matter.
			got = append(got, strings.Join(append([]string{f[0], f[2]}, f[5:]...), " "))
		}
	}
	want := []string{"drwxr-xr-x 0 bin", "-rwxr-xr-x 5 bin/x", "lrwxrwxrwx 0 bin/sh -> x", "crw------- 0 console"}
	if !slices.Equal(got, want) {
		t.Errorf("cpio -tv:\n%s\nwant %q", out, want)
	}
}

func TestResolveModules(t *testing.T) {
	dir := t.TempDir()
	dep := "kernel/a/virtio.ko:\n" +
		"kernel/a/virtio_ring.ko: kernel/a/virtio.ko\n" +
		"kernel/a/virtio-pci.ko.xz: kernel/a/virtio_ring.ko kernel/a/virtio.ko\n" +
		"kernel/b/evdev.ko:\n"
	for name, content := range map[string]string{"modules.dep": dep, "modules.builtin": "kernel/drivers/acpi/button.ko\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := resolveModules(dir, []string{"button", "virtio_pci", "virtio_ring", "evdev"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range got {
		names = append(names, m.name)
	}
	if s := strings.Join(names, " "); s != "virtio virtio_ring virtio_pci evdev" {
		t.Errorf("load order %q", s)
	}
	if got[2].path != filepath.Join(dir, "kernel/a/virtio-pci.ko.xz") {
		t.Errorf("path %q", got[2].path)
	}
	if _, err := resolveModules(dir, []string{"nope"}); err == nil {
		t.Error("missing module: no error")
	}
}

func TestVersionLess(t *testing.T) {
	for _, c := range [][2]string{
		{"6.1.0-48-amd64", "6.10.0-1-amd64"},
		{"6.1.0-9-amd64", "6.1.0-48-amd64"},
		{"6.1.0-48-amd64", "6.1.0-48-cloud-amd64"},
	} {
		if !versionLess(c[0], c[1]) || versionLess(c[1], c[0]) {
			t.Errorf("versionLess(%q, %q) wrong", c[0], c[1])
		}
	}
}

func TestReadModule(t *testing.T) {
	dir := t.TempDir()
	want := []byte("\x7fELF fake module")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(want); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"a.ko": want, "b.ko.gz": gz.Bytes()}
	// Debian compresses modules with xz (no BCJ filter), which busybox reads.
	if xz, err := exec.LookPath("xz"); err == nil {
		cmd := exec.Command(xz, "--check=crc32", "-c")
		cmd.Stdin = bytes.NewReader(want)
		out, err := cmd.Output()
		if err != nil {
			t.Fatal(err)
		}
		files["c.ko.xz"] = out
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readModule(p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("readModule(%s) = %q, %v", name, got, err)
		}
	}
}
