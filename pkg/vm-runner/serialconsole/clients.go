package serialconsole

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/vmop/vmop/pkg/runnerexec"
)

// maxPending is how much output may wait for one client: more, and that
// client loses output rather than holding up the guest or anyone else.
const maxPending = 256 << 10

// client is one connection on ClientSocket after its handshake.
type client struct {
	conn  net.Conn
	mode  runnerexec.Mode
	who   string
	since time.Time
	out   *outbox
}

func (c *Console) acceptClients() {
	defer c.wg.Done()
	for {
		conn, err := c.clientL.Accept()
		if err != nil {
			return
		}
		c.wg.Add(1)
		go c.serve(conn)
	}
}

// serve runs one client's connection to its end.
func (c *Console) serve(conn net.Conn) {
	defer c.wg.Done()
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(helloTimeout))
	r := bufio.NewReader(conn)
	hello, err := readLine(r)
	if err != nil {
		return
	}
	_ = conn.SetDeadline(time.Time{})
	m, who, _ := strings.Cut(hello, " ")
	mode := runnerexec.Mode(m)
	switch mode {
	case runnerexec.ModeHistory:
		h, err := c.History()
		if err != nil {
			c.log.Warn("Reading the serial console's output", "err", err)
		}
		_, _ = conn.Write(append([]byte(replyOK+"\n"), h...))
		return
	case runnerexec.ModeFollow, runnerexec.ModeAttach:
	default:
		fmt.Fprintf(conn, "unknown mode %q\n", m)
		return
	}
	cl := &client{conn: conn, mode: mode, who: runnerexec.CleanWho(who), since: time.Now(), out: newOutbox(maxPending)}
	if err := c.subscribe(cl); err != nil {
		var inUse *InUseError
		if errors.As(err, &inUse) {
			fmt.Fprintf(conn, "%s %s %s\n", replyInUse, inUse.Since.UTC().Format(time.RFC3339), inUse.Who)
		}
		return
	}
	defer c.unsubscribe(cl)
	if mode == runnerexec.ModeAttach {
		c.log.Info("Serial console attached", "client", cl.who)
		defer c.log.Info("Serial console detached", "client", cl.who)
	}
	done, flushed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(flushed)
		if err := cl.out.run(conn, done); err != nil {
			conn.Close() // ends the input loop
		}
	}()
	c.input(cl, r)
	// What the client has not got yet goes out before the end (Close
	// bounds how long that may take).
	close(done)
	<-flushed
}

// input reads the client's input until it ends: to the guest from the
// interactive client, nowhere from a follower.
func (c *Console) input(cl *client, r io.Reader) {
	if cl.mode == runnerexec.ModeFollow {
		_, _ = io.Copy(io.Discard, r)
		return
	}
	buf := make([]byte, 1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := c.toGuest(buf[:n]); werr != nil {
				c.log.Warn("Writing to the serial console", "err", werr)
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// subscribe adds a client, with "ok" and, for a follower, the kept output
// as the first it gets: taken under the lock of the output, so that none
// is missed or repeated. A second interactive client gets an *InUseError.
func (c *Console) subscribe(cl *client) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("closed")
	}
	if cl.mode == runnerexec.ModeAttach {
		if a := c.attached; a != nil {
			return &InUseError{Who: a.who, Since: a.since}
		}
		c.attached = cl
	}
	first := []byte(replyOK + "\n")
	if cl.mode == runnerexec.ModeFollow {
		h, err := c.file.history()
		if err != nil {
			c.log.Warn("Reading the serial console's output", "err", err)
		}
		first = append(first, h...)
	}
	cl.out.prime(first)
	c.clients[cl] = struct{}{}
	return nil
}

func (c *Console) unsubscribe(cl *client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.clients, cl)
	if c.attached == cl {
		c.attached = nil
	}
}

// outbox is the output waiting for one client, at most limit bytes.
type outbox struct {
	mu      sync.Mutex
	buf     []byte
	limit   int
	dropped int
	ready   chan struct{}
}

func newOutbox(limit int) *outbox {
	return &outbox{limit: limit, ready: make(chan struct{}, 1)}
}

// prime puts the first output in, whatever its size.
func (o *outbox) prime(b []byte) {
	o.mu.Lock()
	o.buf = append(o.buf, b...)
	o.mu.Unlock()
	o.signal()
}

// push adds output without ever waiting: what does not fit is dropped,
// and the client is told how much where it is missing.
func (o *outbox) push(b []byte) {
	o.mu.Lock()
	if len(o.buf)+len(b) > o.limit {
		o.dropped += len(b)
		o.mu.Unlock()
		return
	}
	if o.dropped > 0 {
		o.buf = fmt.Appendf(o.buf, "\r\n[vm-runner: %d bytes of the guest's output dropped here: this client read too slowly]\r\n", o.dropped)
		o.dropped = 0
	}
	o.buf = append(o.buf, b...)
	o.mu.Unlock()
	o.signal()
}

func (o *outbox) signal() {
	select {
	case o.ready <- struct{}{}:
	default:
	}
}

// run writes the output to w as it comes until a write fails, or done,
// after writing what is left.
func (o *outbox) run(w io.Writer, done <-chan struct{}) error {
	for {
		last := false
		select {
		case <-done:
			last = true
		case <-o.ready:
		}
		o.mu.Lock()
		b := o.buf
		o.buf = nil
		o.mu.Unlock()
		if len(b) > 0 {
			if _, err := w.Write(b); err != nil {
				return err
			}
		}
		if last {
			return nil
		}
	}
}
