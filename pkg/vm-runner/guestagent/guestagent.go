// Package guestagent talks to qemu-guest-agent through the host end of its
// virtio-serial port (a unix socket qemu listens on).
//
// qemu serves that socket to one client at a time and queues the others,
// so a client connects, asks and closes: the runner's status poll and a
// user's or test's commands then take turns instead of locking each other
// out. Each connection starts with guest-sync-delimited, which skips what
// an earlier client left unread in the port.
package guestagent

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// DefaultTimeout bounds a connection whose context has no deadline.
const DefaultTimeout = 10 * time.Second

// Client is one connection to the agent.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	dec  *json.Decoder
	id   int64
}

// Error is an error the agent answered.
type Error struct {
	Command, Class, Desc string
}

func (e *Error) Error() string { return fmt.Sprintf("guest agent: %s: %s", e.Command, e.Desc) }

// Dial connects to the agent's socket and synchronises with the agent. It
// fails when the agent does not answer within the context's deadline (or
// DefaultTimeout): no agent runs, or another client holds the port.
func Dial(ctx context.Context, socket string) (*Client, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	conn, err := dialBusy(ctx, socket)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, r: bufio.NewReader(conn), id: rand.Int64N(1 << 31)}
	if err := c.sync(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("guest agent: no answer: %w", err)
	}
	return c, nil
}

// busyRetry is how often dialBusy tries a busy socket again.
const busyRetry = 50 * time.Millisecond

// dialBusy connects to socket, waiting while it is busy: qemu serves the
// agent's port to one client at a time and keeps next to none waiting, so
// that a client that comes while another (the runner, kubectl vm) talks
// to the agent is refused with EAGAIN rather than queued.
func dialBusy(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "unix", socket)
		if !errors.Is(err, syscall.EAGAIN) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (another client talks to the guest agent)", err)
		case <-time.After(busyRetry):
		}
	}
}

// Close ends the connection, letting the next client in.
func (c *Client) Close() error { return c.conn.Close() }

// sync sends guest-sync-delimited: the agent answers with a 0xFF byte and
// then the id, after whatever was still queued.
func (c *Client) sync(ctx context.Context) error {
	defer c.watch(ctx)()
	// A 0xFF first makes the agent drop a partial request of an earlier client.
	if _, err := c.conn.Write([]byte{0xff}); err != nil {
		return err
	}
	if err := c.send("guest-sync-delimited", map[string]int64{"id": c.id}); err != nil {
		return err
	}
	r := c.r
	for {
		if _, err := r.ReadBytes(0xff); err != nil {
			return err
		}
		dec := json.NewDecoder(r)
		var resp struct {
			Return int64 `json:"return"`
		}
		err := dec.Decode(&resp)
		if err == nil && resp.Return == c.id {
			c.dec = dec
			return nil
		}
		// An earlier client's answer: look for ours in what follows,
		// including what the decoder read ahead.
		r = bufio.NewReader(io.MultiReader(dec.Buffered(), r))
	}
}

// watch makes the connection's reads and writes end with ctx; call the
// returned function when done.
func (c *Client) watch(ctx context.Context) func() {
	if dl, ok := ctx.Deadline(); ok {
		_ = c.conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		stop()
		_ = c.conn.SetDeadline(time.Time{})
	}
}

func (c *Client) send(command string, args any) error {
	req := map[string]any{"execute": command}
	if args != nil {
		req["arguments"] = args
	}
	return json.NewEncoder(c.conn).Encode(req)
}

// Do runs command with args and decodes its answer into result (nil to
// drop it).
func (c *Client) Do(ctx context.Context, command string, args, result any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultTimeout)
		defer cancel()
	}
	defer c.watch(ctx)()
	if err := c.send(command, args); err != nil {
		return err
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := c.dec.Decode(&resp); err != nil {
		return fmt.Errorf("guest agent: %s: %w", command, err)
	}
	if resp.Error != nil {
		return &Error{Command: command, Class: resp.Error.Class, Desc: resp.Error.Desc}
	}
	if result == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Return, result); err != nil {
		return fmt.Errorf("guest agent: %s: %w", command, err)
	}
	return nil
}

// Shutdown asks the guest to power off. The agent does not answer it: the
// guest goes down instead.
func (c *Client) Shutdown(ctx context.Context) error {
	defer c.watch(ctx)()
	return c.send("guest-shutdown", map[string]string{"mode": "powerdown"})
}

// Interface is one of guest-network-get-interfaces' answers.
type Interface struct {
	Name            string      `json:"name"`
	HardwareAddress string      `json:"hardware-address,omitempty"`
	IPAddresses     []IPAddress `json:"ip-addresses,omitempty"`
}

// IPAddress is an address of an Interface.
type IPAddress struct {
	Type    string `json:"ip-address-type"` // ipv4 or ipv6
	Address string `json:"ip-address"`
	Prefix  int    `json:"prefix"`
}

// Info is what the agent tells of its guest.
type Info struct {
	AgentVersion string
	OS           v1.OSInfo
	Hostname     string
	Interfaces   []Interface
}

// Info asks the agent for its version, the OS, the host name and the
// network interfaces.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	var agent struct {
		Version string `json:"version"`
	}
	var host struct {
		HostName string `json:"host-name"`
	}
	// The first error ends it: an agent that does not answer one command
	// will not answer the next, and each would wait out its timeout.
	for _, q := range []struct {
		command string
		result  any
	}{
		{"guest-info", &agent},
		{"guest-get-osinfo", &info.OS},
		{"guest-get-host-name", &host},
		{"guest-network-get-interfaces", &info.Interfaces},
	} {
		if err := c.Do(ctx, q.command, nil, q.result); err != nil {
			return Info{}, err
		}
	}
	info.AgentVersion, info.Hostname = agent.Version, host.HostName
	return info, nil
}

// ExecResult is the end of a program run by Exec.
type ExecResult struct {
	ExitCode       int
	Stdout, Stderr []byte
}

// Exec runs a program in the guest, with input on its stdin, and waits
// for it to end.
func (c *Client) Exec(ctx context.Context, path string, args []string, input []byte) (ExecResult, error) {
	req := map[string]any{"path": path, "arg": args, "capture-output": true}
	if input != nil {
		req["input-data"] = base64.StdEncoding.EncodeToString(input)
	}
	var started struct {
		PID int `json:"pid"`
	}
	if err := c.Do(ctx, "guest-exec", req, &started); err != nil {
		return ExecResult{}, err
	}
	for {
		var st struct {
			Exited   bool   `json:"exited"`
			ExitCode int    `json:"exitcode"`
			Signal   int    `json:"signal"`
			OutData  []byte `json:"out-data"`
			ErrData  []byte `json:"err-data"`
		}
		if err := c.Do(ctx, "guest-exec-status", map[string]int{"pid": started.PID}, &st); err != nil {
			return ExecResult{}, err
		}
		if st.Exited {
			code := st.ExitCode
			if st.Signal != 0 {
				code = 128 + st.Signal
			}
			return ExecResult{ExitCode: code, Stdout: st.OutData, Stderr: st.ErrData}, nil
		}
		select {
		case <-ctx.Done():
			return ExecResult{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
