//go:build linux

package spicetest

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/prereq"
)

func TestLoginTicketing(t *testing.T) {
	t.Parallel()
	addr, q := startQEMU(t, "")

	// Neither password nor disable-ticketing: ticketing is on with no
	// password, so nothing gets in.
	wantLogin(t, addr, "", false)
	wantLogin(t, addr, "s3cret", false)

	q.exec(t, "set_password", map[string]any{"protocol": "spice", "password": "s3cret"})
	q.exec(t, "expire_password", map[string]any{"protocol": "spice", "time": "never"})
	wantLogin(t, addr, "s3cret", true)
	wantLogin(t, addr, "wrong", false)
	wantLogin(t, addr, "s3cre", false)
	wantLogin(t, addr, "", false)

	q.exec(t, "expire_password", map[string]any{"protocol": "spice", "time": "now"})
	wantLogin(t, addr, "s3cret", false)

	q.exec(t, "set_password", map[string]any{"protocol": "spice", "password": "new"})
	q.exec(t, "expire_password", map[string]any{"protocol": "spice", "time": "+30"})
	wantLogin(t, addr, "new", true)
	wantLogin(t, addr, "s3cret", false)
}

func TestLoginExpiresAfterLifetime(t *testing.T) {
	t.Parallel()
	addr, q := startQEMU(t, "")
	// "now" makes qemu clear the password; a relative time instead leaves
	// it set and lets spice-server's own expiry check refuse it.
	q.exec(t, "set_password", map[string]any{"protocol": "spice", "password": "short"})
	q.exec(t, "expire_password", map[string]any{"protocol": "spice", "time": "+1"})
	wantLogin(t, addr, "short", true)
	// Expiry has whole-second granularity: refused within about 2 s.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, err := Login(t.Context(), addr, "short")
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("password still accepted 5 s after a 1 s lifetime")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestLoginDisableTicketing(t *testing.T) {
	t.Parallel()
	addr, _ := startQEMU(t, ",disable-ticketing=on")
	wantLogin(t, addr, "", true)
	wantLogin(t, addr, "anything", true)
}

func TestLoginClosedPort(t *testing.T) {
	t.Parallel()
	addr := freeAddr(t)
	ok, err := Login(t.Context(), addr, "x")
	if err == nil {
		t.Fatalf("Login to closed port %s: ok=%v, want error", addr, ok)
	}
}

func TestLoginContextTimeout(t *testing.T) {
	t.Parallel()
	// A peer that accepts and never answers must not hang Login.
	addr := fakeServer(t, func(c net.Conn) { _, _ = io.Copy(io.Discard, c) })
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := Login(ctx, addr, "x")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Login: err=%v, want context.DeadlineExceeded", err)
	}
}

func TestLoginLinkError(t *testing.T) {
	t.Parallel()
	// spice-server reports link errors as a reply with only the error set.
	addr := fakeServer(t, func(c net.Conn) {
		_, _ = io.ReadFull(c, make([]byte, linkHeaderSize+linkMessSize+4))
		le := binary.LittleEndian
		b := le.AppendUint32(nil, magic)
		b = le.AppendUint32(b, versionMajor)
		b = le.AppendUint32(b, versionMinor)
		b = le.AppendUint32(b, linkReplySize)
		b = le.AppendUint32(b, 4) // version mismatch
		b = append(b, make([]byte, linkReplySize-4)...)
		_, _ = c.Write(b)
	})
	_, err := Login(t.Context(), addr, "x")
	var le LinkError
	if !errors.As(err, &le) || le != 4 {
		t.Fatalf("Login: err=%v, want LinkError(4)", err)
	}
}

func TestLoginBadMagic(t *testing.T) {
	t.Parallel()
	addr := fakeServer(t, func(c net.Conn) {
		_, _ = io.ReadFull(c, make([]byte, linkHeaderSize+linkMessSize+4))
		_, _ = c.Write([]byte("RFB 003.008\n0000"))
	})
	if _, err := Login(t.Context(), addr, "x"); err == nil {
		t.Fatal("Login against non-SPICE peer: want error")
	}
}

func wantLogin(t *testing.T, addr, password string, want bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	ok, err := Login(ctx, addr, password)
	if err != nil {
		t.Fatalf("Login(%q): %v", password, err)
	}
	if ok != want {
		t.Fatalf("Login(%q) = %v, want %v", password, ok, want)
	}
}

// fakeServer serves each connection with handle and returns its address.
func fakeServer(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				handle(c)
			})
		}
	})
	return l.Addr().String()
}

// freeAddr returns a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(freeport.Get(t)))
}

// startQEMU starts a paused qemu with a SPICE server on loopback; extra is
// appended to the -spice options. It returns the SPICE address and a QMP
// client that has left capabilities negotiation.
func startQEMU(t *testing.T, extra string) (string, *qmp) {
	t.Helper()
	prereq.Commands(t, "qemu-system-x86", "qemu-system-x86_64")
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	sock := filepath.Join(dir, "qmp.sock")
	addr := freeAddr(t)
	host, port, _ := net.SplitHostPort(addr)

	var stderr bytes.Buffer
	cmd := exec.Command(bin,
		"-S", "-nodefaults", "-display", "none",
		"-machine", "q35,accel=tcg", "-m", "64",
		"-qmp", "unix:"+sock+",server=on,wait=off",
		"-spice", "port="+port+",addr="+host+extra,
	)
	cmd.Stdout = &stderr
	cmd.Stderr = &stderr
	// Own process group so cleanup gets everything; die with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
		if t.Failed() {
			t.Logf("qemu output:\n%s", stderr.String())
		}
	})

	// The socket appears once qemu is up; poll, watching for early exit.
	deadline := time.Now().Add(10 * time.Second)
	var conn net.Conn
	for {
		conn, err = net.Dial("unix", sock)
		if err == nil {
			break
		}
		select {
		case <-exited:
			t.Fatalf("qemu exited early (no SPICE support? run `make deps`): %s\n%s", cmd.ProcessState, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("qmp socket never came up: %v", err)
		}
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	q := &qmp{conn: conn, dec: json.NewDecoder(conn)}
	var greeting map[string]json.RawMessage
	if err := q.dec.Decode(&greeting); err != nil {
		t.Fatalf("qmp greeting: %v", err)
	}
	if _, has := greeting["QMP"]; !has {
		t.Fatalf("qmp greeting has no QMP key: %v", greeting)
	}
	// The monitor only answers from the main loop, i.e. after SPICE is listening.
	q.exec(t, "qmp_capabilities", nil)
	return addr, q
}

// qmp is just enough of a QMP client for these tests.
type qmp struct {
	conn net.Conn
	dec  *json.Decoder
}

func (q *qmp) exec(t *testing.T, command string, args map[string]any) {
	t.Helper()
	if err := q.run(command, args); err != nil {
		t.Fatalf("qmp %s: %v", command, err)
	}
}

func (q *qmp) run(command string, args map[string]any) error {
	if err := q.conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return err
	}
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := q.conn.Write(append(b, '\n')); err != nil {
		return err
	}
	for {
		var resp struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := q.dec.Decode(&resp); err != nil {
			return err
		}
		switch {
		case resp.Event != "":
			continue // SPICE_CONNECTED and friends arrive asynchronously
		case resp.Error != nil:
			return fmt.Errorf("%s: %s", resp.Error.Class, resp.Error.Desc)
		case resp.Return != nil:
			return nil
		default:
			return errors.New("qmp reply with neither return nor error")
		}
	}
}
