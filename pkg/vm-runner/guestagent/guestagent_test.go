package guestagent_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
)

// fakeAgent answers as qemu-guest-agent does on the port, after writing
// what an earlier client left unread (a stale answer, a stale sync).
func fakeAgent(t *testing.T, stale string) string {
	t.Helper()
	l, socket := listen(t)
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go serve(conn, stale)
		}
	}()
	return socket
}

// listen listens on a unix socket, as qemu does for the agent's port,
// until the test ends.
func listen(t *testing.T) (net.Listener, string) {
	t.Helper()
	socket := filepath.Join(t.TempDir(), "ga.sock")
	l, err := net.Listen("unix", socket)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, socket
}

func serve(conn net.Conn, stale string) {
	defer conn.Close()
	r := bufio.NewReader(conn)
	enc := json.NewEncoder(conn)
	_, _ = conn.Write([]byte(stale))
	for {
		b, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		for len(b) > 0 && b[0] == 0xff {
			b = b[1:]
		}
		var req struct {
			Execute   string         `json:"execute"`
			Arguments map[string]any `json:"arguments"`
		}
		if err := json.Unmarshal(b, &req); err != nil {
			return
		}
		switch req.Execute {
		case "guest-sync-delimited":
			_, _ = conn.Write([]byte{0xff})
			_ = enc.Encode(map[string]any{"return": req.Arguments["id"]})
		case "guest-info":
			_ = enc.Encode(map[string]any{"return": map[string]any{"version": "7.2.15"}})
		case "guest-get-osinfo":
			_ = enc.Encode(map[string]any{"return": map[string]any{"id": "debian", "pretty-name": "Debian GNU/Linux 12 (bookworm)"}})
		case "guest-get-host-name":
			_ = enc.Encode(map[string]any{"return": map[string]any{"host-name": "deb"}})
		case "guest-network-get-interfaces":
			_ = enc.Encode(map[string]any{"return": []any{map[string]any{"name": "eth0", "hardware-address": "52:54:00:12:34:56",
				"ip-addresses": []any{map[string]any{"ip-address-type": "ipv4", "ip-address": "10.0.2.15", "prefix": 24}}}}})
		case "guest-exec":
			_ = enc.Encode(map[string]any{"return": map[string]any{"pid": 42}})
		case "guest-exec-status":
			_ = enc.Encode(map[string]any{"return": map[string]any{"exited": true, "exitcode": 3,
				"out-data": base64.StdEncoding.EncodeToString([]byte("out")), "err-data": base64.StdEncoding.EncodeToString([]byte("err"))}})
		default:
			_ = enc.Encode(map[string]any{"error": map[string]any{"class": "CommandNotFound", "desc": "The command " + req.Execute + " has not been found"}})
		}
	}
}

func TestInfoAfterStaleOutput(t *testing.T) {
	// An earlier client's unread answer and sync, before ours.
	socket := fakeAgent(t, "{\"return\": {}}\n\xff{\"return\": 7}\n")
	c, err := guestagent.Dial(t.Context(), socket)
	require.NoError(t, err)
	defer c.Close()
	info, err := c.Info(t.Context())
	require.NoError(t, err)
	require.Equal(t, "7.2.15", info.AgentVersion)
	require.Equal(t, "deb", info.Hostname)
	require.Equal(t, "Debian GNU/Linux 12 (bookworm)", info.OS.PrettyName)
	require.Equal(t, []guestagent.Interface{{Name: "eth0", HardwareAddress: "52:54:00:12:34:56",
		IPAddresses: []guestagent.IPAddress{{Type: "ipv4", Address: "10.0.2.15", Prefix: 24}}}}, info.Interfaces)
}

func TestExecAndErrors(t *testing.T) {
	c, err := guestagent.Dial(t.Context(), fakeAgent(t, ""))
	require.NoError(t, err)
	defer c.Close()
	res, err := c.Exec(t.Context(), "/bin/false", nil, []byte("in"))
	require.NoError(t, err)
	require.Equal(t, guestagent.ExecResult{ExitCode: 3, Stdout: []byte("out"), Stderr: []byte("err")}, res)

	err = c.Do(t.Context(), "guest-no-such", nil, nil)
	var agentErr *guestagent.Error
	require.True(t, errors.As(err, &agentErr), "%v", err)
	require.Equal(t, "CommandNotFound", agentErr.Class)
}

// A socket nobody answers on (qemu's, with no agent in the guest) makes
// Dial fail within its context, not hang.
func TestDialWithoutAgent(t *testing.T) {
	l, socket := listen(t)
	go func() {
		conn, err := l.Accept()
		if err == nil {
			defer conn.Close()
			time.Sleep(5 * time.Second)
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err := guestagent.Dial(ctx, socket)
	require.Error(t, err)
}

// TestDialWaitsWhileBusy: with another client connected and the socket's
// backlog full, as qemu's is, a connect is refused with EAGAIN; Dial waits
// until the other client is done.
func TestDialWaitsWhileBusy(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "ga.sock")
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrUnix{Name: socket}))
	require.NoError(t, syscall.Listen(fd, 0))
	l, err := net.FileListener(os.NewFile(uintptr(fd), socket))
	require.NoError(t, err)
	syscall.Close(fd)
	t.Cleanup(func() { l.Close() })
	// Fill the backlog: connects go through until one is refused.
	var held []net.Conn
	for {
		c, err := net.Dial("unix", socket)
		if err != nil {
			require.ErrorIs(t, err, syscall.EAGAIN)
			break
		}
		held = append(held, c)
		require.Less(t, len(held), 64, "the backlog never fills")
	}
	// The other clients are done after a while; the agent then answers.
	go func() {
		time.Sleep(300 * time.Millisecond)
		for _, c := range held {
			c.Close()
		}
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go serve(conn, "")
		}
	}()
	c, err := guestagent.Dial(t.Context(), socket)
	require.NoError(t, err)
	c.Close()
}

// FuzzAgentOutput: whatever the guest's end of the port writes (the guest
// is not trusted), the client returns, with an answer or an error.
func FuzzAgentOutput(f *testing.F) {
	f.Add([]byte("\xff{\"return\": 1}\n{\"return\": {\"version\": \"x\"}}\n"))
	f.Add([]byte("{\"error\": {\"class\": \"GenericError\"}}\xff\xff{"))
	f.Add([]byte("\xff[1,2]\n{\"return\": [{\"name\": 5}]}"))
	f.Fuzz(func(t *testing.T, out []byte) {
		l, socket := listen(t)
		go func() {
			conn, err := l.Accept()
			if err == nil {
				_, _ = conn.Write(out)
				conn.Close()
			}
		}()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		c, err := guestagent.Dial(ctx, socket)
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Info(ctx)
	})
}
