package serialconsole

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/vmop/vmop/pkg/runnerexec"
)

// The protocol on ClientSocket: the client sends one line, "<mode> <who>",
// and the server answers one line, "ok" or "in-use <RFC 3339 time> <who>"
// (the interactive client and since when it is attached). After "ok" the
// connection carries the guest's output, raw, and with runnerexec.ModeAttach the
// client's input to the guest.

const (
	replyOK    = "ok"
	replyInUse = "in-use"
	// helloTimeout bounds the handshake, so that a client that connects
	// and says nothing holds no goroutine.
	helloTimeout = 5 * time.Second
	// maxHello bounds the client's line.
	maxHello = 512
)

// InUseError refuses a second interactive client.
type InUseError struct {
	// Who is the attached client, as it named itself.
	Who   string
	Since time.Time
}

func (e *InUseError) Error() string {
	return fmt.Sprintf("the serial console is in use: %s is attached (since %s); one interactive client at a time",
		e.Who, e.Since.UTC().Format("15:04:05 MST"))
}

// Dial connects to the ClientSocket at path in mode; who names the client
// to others (user@host). A console with an interactive client already
// refuses runnerexec.ModeAttach with an *InUseError.
func Dial(ctx context.Context, path string, mode runnerexec.Mode, who string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("no runner serves the serial console at %s: %w", path, err)
	}
	_ = c.SetDeadline(time.Now().Add(helloTimeout))
	if _, err := fmt.Fprintf(c, "%s %s\n", mode, runnerexec.CleanWho(who)); err != nil {
		c.Close()
		return nil, err
	}
	r := bufio.NewReader(c)
	line, err := readLine(r)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("the runner's serial console did not answer: %w", err)
	}
	_ = c.SetDeadline(time.Time{})
	if line == replyOK {
		return &bufferedConn{Conn: c, r: r}, nil
	}
	c.Close()
	if rest, ok := strings.CutPrefix(line, replyInUse+" "); ok {
		ts, who, _ := strings.Cut(rest, " ")
		since, _ := time.Parse(time.RFC3339, ts)
		return nil, &InUseError{Who: who, Since: since}
	}
	return nil, fmt.Errorf("the runner's serial console answered %q", line)
}

// readLine reads one line of the handshake, without its newline.
func readLine(r *bufio.Reader) (string, error) {
	var b strings.Builder
	for b.Len() <= maxHello {
		c, err := r.ReadByte()
		if err != nil {
			return "", err
		}
		if c == '\n' {
			return b.String(), nil
		}
		b.WriteByte(c)
	}
	return "", errors.New("handshake line too long")
}

// bufferedConn reads through the reader that took the handshake, which
// may hold the first output already.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite ends the input to the server, as a unix connection can.
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
