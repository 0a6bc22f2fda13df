// Package qmp speaks the QEMU Machine Protocol to one qemu process: typed
// commands, a ctx-aware Execute and a fan-out of asynchronous events.
//
// It runs over github.com/digitalocean/go-qemu's qmp.SocketMonitor and works
// around that monitor's pitfalls:
//   - its reader goroutine blocks on an unbuffered events channel, and with it
//     every command reply, when nobody reads events: Monitor drains that
//     channel in one goroutine from the moment Connect returns and hands the
//     events to buffered per-subscriber channels (drop-oldest when full);
//   - Run has no context or timeout: Execute runs it in a goroutine;
//   - QMP errors come back as errors.New(desc), the class is lost and the raw
//     reply is not returned: Error.Class is recovered from the description
//     (see classFor), which is exact for the messages qemu 7.2 uses with a
//     non-generic class and "GenericError" otherwise;
//   - replies or events longer than 64 KiB (bufio.Scanner's limit) end the
//     connection, so avoid commands with huge replies (query-qmp-schema is
//     about 200 KiB on qemu 7.2);
//   - Connect reads the handshake through a json.Decoder and drops what it
//     read ahead, so an event sent right with the handshake reply is lost
//     (harmless for the runner: qemu -S emits nothing before cont).
package qmp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	goqmp "github.com/digitalocean/go-qemu/qmp"
)

// EventBuffer is the number of events a subscriber's channel holds. When a
// subscriber falls further behind, the oldest undelivered event is dropped so
// that the newest state (e.g. the last tray or run-state change) survives.
const EventBuffer = 256

// ErrClosed reports that the QMP connection has ended: qemu exited, closed
// the socket, the connection failed, or Close was called.
var ErrClosed = errors.New("qmp: connection closed")

// Dial retry and timeout settings; qemu creates the socket shortly after it
// starts, and a stale socket file refuses connections until then.
const (
	dialRetry   = 20 * time.Millisecond
	dialTimeout = 2 * time.Second
)

// Event is an asynchronous QMP event.
type Event struct {
	// Name is the event name, e.g. "SHUTDOWN" (see the Event* constants).
	Name string
	// Data is the event's "data" member; numbers are float64 (go-qemu decodes
	// it untyped). Use Decode for a typed view.
	Data map[string]any
	// Time is qemu's timestamp of the event (host wall clock).
	Time time.Time
}

// Decode converts Data into v, e.g. a *ShutdownData.
func (e Event) Decode(v any) error {
	b, err := json.Marshal(e.Data)
	if err != nil {
		return fmt.Errorf("qmp: event %s: %w", e.Name, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("qmp: event %s: %w", e.Name, err)
	}
	return nil
}

// Error is an error reply from qemu ({"error": {"class", "desc"}}).
type Error struct {
	// Class is the QMP error class: GenericError, CommandNotFound,
	// DeviceNotActive, DeviceNotFound or KVMMissingCap. go-qemu does not pass
	// the class on, so it is derived from Desc (see classFor).
	Class string
	// Desc is qemu's human-readable description, verbatim.
	Desc string
}

func (e *Error) Error() string { return "qmp: " + e.Class + ": " + e.Desc }

// Monitor is a QMP connection to one qemu process. Its methods are safe for
// concurrent use; commands are serialized by go-qemu.
type Monitor struct {
	mon     *goqmp.SocketMonitor
	version string

	done     chan struct{}
	discOnce sync.Once
	discErr  error

	mu    sync.Mutex
	subs  map[chan Event]func() bool // value stops the ctx watcher
	ended bool
}

// Dial connects to qemu's QMP unix socket, retrying until the socket accepts
// connections or ctx ends, and does the capabilities handshake.
func Dial(ctx context.Context, socket string) (*Monitor, error) {
	var mon *goqmp.SocketMonitor
	for {
		timeout := dialTimeout
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
			timeout = max(time.Until(dl), time.Millisecond)
		}
		var err error
		mon, err = goqmp.NewSocketMonitor("unix", socket, timeout)
		if err == nil {
			break
		}
		if !retryable(socket, err) {
			return nil, fmt.Errorf("qmp: dial %s: %w", socket, err)
		}
		t := time.NewTimer(dialRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("qmp: dial %s: %w (last error: %v)", socket, context.Cause(ctx), err)
		case <-t.C:
		}
	}

	// Connect reads the greeting without a deadline, so a qemu that never
	// greets (e.g. another client holds the monitor) would block Dial forever.
	connected := make(chan error, 1)
	go func() { connected <- mon.Connect() }()
	select {
	case err := <-connected:
		if err != nil {
			_ = mon.Disconnect()
			return nil, fmt.Errorf("qmp: handshake on %s: %w", socket, err)
		}
	case <-ctx.Done():
		// Disconnect only after Connect returned: they share unsynchronized
		// fields. The goroutine ends when qemu greets or exits.
		go func() {
			<-connected //nolint:errcheck // Connect's error was given up with ctx
			_ = mon.Disconnect()
		}()
		return nil, fmt.Errorf("qmp: handshake on %s: %w", socket, context.Cause(ctx))
	}

	// Register as listener at once: go-qemu discards events while nobody has
	// called Events, and its reader blocks while nobody drains the channel.
	events, err := mon.Events(context.Background())
	if err != nil {
		_ = mon.Disconnect()
		return nil, fmt.Errorf("qmp: events on %s: %w", socket, err)
	}
	m := &Monitor{
		mon:  mon,
		done: make(chan struct{}),
		subs: make(map[chan Event]func() bool),
	}
	if mon.Version != nil {
		m.version = mon.Version.String()
	}
	go m.pump(events)
	return m, nil
}

// retryable reports dial errors that mean "qemu has not created or is not
// yet listening on the socket". A stale socket file refuses connections, but
// so does a path that is no socket at all, which will not get better.
func retryable(socket string, err error) bool {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.EAGAIN):
		return true
	case errors.Is(err, syscall.ECONNREFUSED):
		fi, serr := os.Stat(socket)
		return serr != nil || fi.Mode().Type() == fs.ModeSocket
	}
	return false
}

// Version is qemu's version from the greeting, e.g. "7.2.22".
func (m *Monitor) Version() string { return m.version }

// Done is closed when the connection has ended (qemu exited or closed the
// socket, a read failed, or Close was called). Subscriber channels are closed
// at the same time, after the events received before the end.
func (m *Monitor) Done() <-chan struct{} { return m.done }

// Close ends the connection and waits until Done is closed.
func (m *Monitor) Close() error {
	err := m.disconnect()
	<-m.done
	return err
}

func (m *Monitor) disconnect() error {
	m.discOnce.Do(func() { m.discErr = m.mon.Disconnect() })
	return m.discErr
}

// pump is the only reader of go-qemu's events channel, which go-qemu closes
// when its reader stops, i.e. when the connection has ended.
func (m *Monitor) pump(events <-chan goqmp.Event) {
	for ev := range events {
		e := Event{Name: ev.Event, Data: ev.Data, Time: time.Now()}
		if ev.Timestamp.Seconds != 0 {
			e.Time = time.Unix(ev.Timestamp.Seconds, ev.Timestamp.Microseconds*1000)
		}
		m.mu.Lock()
		for ch := range m.subs {
			push(ch, e)
		}
		m.mu.Unlock()
	}
	// Release the socket also when qemu went away on its own.
	_ = m.disconnect()
	m.mu.Lock()
	m.ended = true
	for ch, stop := range m.subs {
		stop()
		close(ch)
		delete(m.subs, ch)
	}
	m.mu.Unlock()
	close(m.done)
}

// push never blocks: a full channel loses its oldest event.
func push(ch chan Event, e Event) {
	select {
	case ch <- e:
		return
	default:
	}
	select {
	case <-ch:
	default:
	}
	select {
	case ch <- e:
	default:
	}
}

// Events subscribes to the events that arrive from now on, until ctx ends or
// the connection ends; then the channel is closed. The channel holds
// EventBuffer events; a subscriber that falls further behind loses the oldest
// ones, never blocking commands or other subscribers.
func (m *Monitor) Events(ctx context.Context) <-chan Event {
	ch := make(chan Event, EventBuffer)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		close(ch)
		return ch
	}
	m.subs[ch] = context.AfterFunc(ctx, func() { m.unsubscribe(ch) })
	return ch
}

func (m *Monitor) unsubscribe(ch chan Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.subs[ch]; ok {
		delete(m.subs, ch)
		close(ch)
	}
}

// request is a QMP command on the wire.
type request struct {
	Execute   string `json:"execute"`
	Arguments any    `json:"arguments,omitempty"`
}

// Execute runs a QMP command. args (nil for none) is marshalled as the
// "arguments" object; the reply's "return" member is decoded into result
// unless result is nil. A QMP error reply is returned as *Error; a lost
// connection as an error wrapping ErrClosed. When ctx ends first, Execute
// returns its error; the command may still take effect in qemu and its
// reply is discarded.
func (m *Monitor) Execute(ctx context.Context, command string, args, result any) error {
	select {
	case <-m.done:
		return fmt.Errorf("qmp %s: %w", command, ErrClosed)
	default:
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
	}
	cmd, err := json.Marshal(request{Execute: command, Arguments: args})
	if err != nil {
		return fmt.Errorf("qmp %s: arguments: %w", command, err)
	}

	type reply struct {
		raw []byte
		err error
	}
	replies := make(chan reply, 1)
	go func() {
		raw, err := m.mon.Run(cmd)
		replies <- reply{raw, err}
	}()
	var r reply
	select {
	case r = <-replies:
	case <-ctx.Done():
		return fmt.Errorf("qmp %s: %w", command, context.Cause(ctx))
	}

	if r.err != nil {
		if isQMPError(r.err) {
			return &Error{Class: classFor(r.err.Error()), Desc: r.err.Error()}
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(r.err, &typeErr) {
			return fmt.Errorf("qmp %s: malformed reply: %w", command, r.err)
		}
		// go-qemu's reader has stopped (or the write failed): the
		// connection is unusable.
		return fmt.Errorf("qmp %s: %w: %w", command, ErrClosed, r.err)
	}
	if result == nil {
		return nil
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(r.raw, &resp); err != nil {
		return fmt.Errorf("qmp %s: malformed reply: %w", command, err)
	}
	if len(resp.Return) == 0 {
		return fmt.Errorf("qmp %s: reply has no return value", command)
	}
	if err := json.Unmarshal(resp.Return, result); err != nil {
		return fmt.Errorf("qmp %s: decode reply: %w", command, err)
	}
	return nil
}

// errorStringType is the type of errors.New's values, which is what go-qemu
// turns a QMP error reply into; its transport failures have other types.
var errorStringType = reflect.TypeOf(errors.New(""))

func isQMPError(err error) bool {
	if reflect.TypeOf(err) != errorStringType {
		return false
	}
	// Sentinels built with errors.New that go-qemu's reader may pass on.
	for _, s := range []error{bufio.ErrTooLong, bufio.ErrNegativeAdvance, bufio.ErrAdvanceTooFar,
		bufio.ErrBadReadCount, io.EOF, io.ErrUnexpectedEOF, io.ErrNoProgress} {
		if errors.Is(err, s) {
			return false
		}
	}
	return true
}

// deviceNotFound matches qemu's messages raised with ERROR_CLASS_DEVICE_NOT_FOUND
// (qdev, block, QOM and chardev lookups; yank instances).
var deviceNotFound = regexp.MustCompile(`^(Device|Instance) '.*' not found$`)

// classFor recovers the QMP error class that go-qemu drops. qemu uses the
// non-generic classes only for the messages below (qemu 7.2 source, and
// checked against a real qemu by the tests); everything else is GenericError.
func classFor(desc string) string {
	switch {
	case strings.HasPrefix(desc, "The command ") && strings.HasSuffix(desc, " has not been found"),
		strings.HasPrefix(desc, "Expecting capabilities negotiation"),
		strings.HasPrefix(desc, "Capabilities negotiation is already complete"):
		return "CommandNotFound"
	case desc == "No balloon device has been activated":
		return "DeviceNotActive"
	case deviceNotFound.MatchString(desc):
		return "DeviceNotFound"
	case strings.HasPrefix(desc, "Using KVM without "):
		return "KVMMissingCap"
	}
	return "GenericError"
}
