// Package qmptest runs fake qemu monitors for tests, in the spirit of
// net/http/httptest: a Server speaks QMP on a real unix socket (greeting,
// qmp_capabilities), hands every other command to a Handler and records
// the commands it received, so that a test drives the real qmp.Monitor
// without qemu.
package qmptest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Greeting is what the Server sends first: qemu 7.2's, with the version
// that the Monitor reports as "7.2.0".
const Greeting = `{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "fake"}, "capabilities": ["oob"]}}`

// A Handler answers one command on c: Return, Error, or lines of its own,
// with events before or after the reply as qemu interleaves them. It may
// answer later from another goroutine.
type Handler func(c *Conn, cmd Command)

// Server is a fake qemu monitor. It serves connections one after the
// other, like qemu's monitor.
type Server struct {
	// Socket is the unix socket to dial.
	Socket string
	// CapabilitiesReply, when set before Start, answers qmp_capabilities
	// (a raw JSON line) instead of success.
	CapabilitiesReply string
	// NoGreeting, when set before Start, accepts connections and never
	// greets.
	NoGreeting bool

	t       testing.TB
	handler Handler

	mu    sync.Mutex
	conns []*Conn
	cmds  []Command
}

// Command is a command the Server received.
type Command struct {
	Execute   string         `json:"execute"`
	Arguments map[string]any `json:"arguments"`
	// Args is "arguments" as sent, nil without.
	Args json.RawMessage `json:"-"`
	// Raw is the whole command as sent.
	Raw json.RawMessage `json:"-"`
}

// String is the command name and its arguments as sent, e.g.
// `device_del {"id":"cpu1"}`.
func (c Command) String() string {
	if len(c.Args) == 0 {
		return c.Execute
	}
	var b bytes.Buffer
	_ = json.Compact(&b, c.Args) // valid JSON: the Server decoded it
	return c.Execute + " " + b.String()
}

// NewServer starts a Server that answers commands with h. It stops when
// the test ends.
func NewServer(t testing.TB, h Handler) *Server {
	t.Helper()
	s := NewUnstartedServer(t, h)
	s.Start()
	return s
}

// NewUnstartedServer returns a Server to configure and Start. Its socket
// does not exist until then.
func NewUnstartedServer(t testing.TB, h Handler) *Server {
	t.Helper()
	return &Server{t: t, handler: h, Socket: filepath.Join(TempDir(t), "qmp.sock")}
}

// TempDir is a new directory for unix sockets, removed when the test
// ends: t.TempDir's paths can exceed the 108 bytes a socket path may have.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qmp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Start listens on Socket and serves in the background until the test
// ends.
func (s *Server) Start() {
	s.t.Helper()
	ln, err := net.Listen("unix", s.Socket)
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c := &Conn{t: s.t, conn: conn}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.serve(c)
		}
	}()
}

func (s *Server) serve(c *Conn) {
	defer c.Close()
	if s.NoGreeting {
		_, _ = c.conn.Read(make([]byte, 1))
		return
	}
	c.Send(Greeting)
	dec := json.NewDecoder(bufio.NewReader(c.conn))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return
		}
		var cmd Command
		var args struct {
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(raw, &cmd) != nil || json.Unmarshal(raw, &args) != nil {
			c.Error("GenericError", "JSON parse error")
			continue
		}
		cmd.Raw, cmd.Args = raw, args.Arguments
		if cmd.Execute == "qmp_capabilities" {
			if s.CapabilitiesReply != "" {
				c.Send(s.CapabilitiesReply)
			} else {
				c.Return(struct{}{})
			}
			continue
		}
		s.mu.Lock()
		s.cmds = append(s.cmds, cmd)
		s.mu.Unlock()
		s.handler(c, cmd)
	}
}

// Conn is the latest connection, nil before the first.
func (s *Server) Conn() *Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) == 0 {
		return nil
	}
	return s.conns[len(s.conns)-1]
}

// Commands are the commands received so far but qmp_capabilities, in
// order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Command(nil), s.cmds...)
}

// Conn is one client connection. Its methods are safe for concurrent use,
// so that a test can send events while commands run.
type Conn struct {
	t    testing.TB
	conn net.Conn
	wmu  sync.Mutex
}

// Send writes raw JSON lines.
func (c *Conn) Send(lines ...string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for _, l := range lines {
		_, _ = c.conn.Write([]byte(l + "\n"))
	}
}

func (c *Conn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Errorf("qmptest: %v", err)
		return
	}
	c.Send(string(b))
}

// Return replies with success and v as the return value.
func (c *Conn) Return(v any) { c.send(map[string]any{"return": v}) }

// Error replies with a QMP error.
func (c *Conn) Error(class, desc string) {
	c.send(map[string]any{"error": map[string]string{"class": class, "desc": desc}})
}

// Event sends event name with data (none when nil), stamped now.
func (c *Conn) Event(name string, data any) {
	now := time.Now()
	ev := map[string]any{"event": name, "timestamp": map[string]int64{"seconds": now.Unix(), "microseconds": int64(now.Nanosecond() / 1000)}}
	if data != nil {
		ev["data"] = data
	}
	c.send(ev)
}

// Close ends the connection, as qemu's exit does.
func (c *Conn) Close() { c.conn.Close() }
