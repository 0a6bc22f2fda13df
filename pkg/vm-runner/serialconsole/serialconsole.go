// Package serialconsole is the runner's end of a VM's serial port. qemu
// connects to a unix socket of the runner (GuestSocket) and the runner
// reads everything the guest writes: it keeps the last of it in two files
// (LogFile, and OldLogFile before it), copies it line by line to the pod
// log when asked to, and serves clients on a second socket (ClientSocket):
// one interactive client at a time, whose input goes to the guest, and any
// number of read-only followers.
//
// The guest is never held up by a client: a socket chardev stops the
// guest's UART when nobody reads it, so the runner always reads, and a
// client that cannot keep up loses output (it is told how much) instead of
// slowing the others.
package serialconsole

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Files and sockets in the runtime directory.
const (
	// GuestSocket is where qemu's chardev connects as a client: the
	// runner listens before qemu starts, so no early boot output is lost.
	GuestSocket = "console.sock"
	// ClientSocket is where vm-runner serial connects.
	ClientSocket = "serial.sock"
	// LogFile holds the newest output, OldLogFile the output before it.
	LogFile    = "console.log"
	OldLogFile = "console.log.1"
)

// DefaultLogSize is the size at which LogFile becomes OldLogFile: the last
// 128 to 256 KiB of output are kept, a few hundred lines of a boot.
const DefaultLogSize = 128 << 10

// Options configure a Console.
type Options struct {
	// Dir is the runtime directory that holds the sockets and files.
	Dir string
	// LogSize is the size of each log file; DefaultLogSize when 0.
	LogSize int64
	// PodLog receives the guest's output line by line, each line after
	// PodLogPrefix, while SetPodLog is on; nil for none.
	PodLog       io.Writer
	PodLogPrefix string
	Logger       *slog.Logger
}

// Console is one VM's serial port.
type Console struct {
	opts    Options
	log     *slog.Logger
	guestL  net.Listener
	clientL net.Listener

	// mu orders the guest's output: the log files, the pod log and the
	// clients see it in the same order, and a new follower gets the kept
	// output and what follows without a gap or a repeat.
	mu       sync.Mutex
	file     *logFile
	podLog   *lineWriter
	podLogOn bool
	clients  map[*client]struct{}
	attached *client
	guest    net.Conn
	closed   bool

	readerDone chan struct{} // closed when the guest's output has ended
	wg         sync.WaitGroup
}

// Listen creates the log file and both sockets in o.Dir and starts
// serving; qemu is to connect to GuestPath.
func Listen(o Options) (*Console, error) {
	if o.LogSize <= 0 {
		o.LogSize = DefaultLogSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	c := &Console{opts: o, log: o.Logger, clients: map[*client]struct{}{}, readerDone: make(chan struct{})}
	var err error
	if c.file, err = openLogFile(o.Dir, o.LogSize); err != nil {
		return nil, err
	}
	if o.PodLog != nil {
		c.podLog = &lineWriter{w: o.PodLog, prefix: o.PodLogPrefix}
	}
	// Sockets left by a runner that was killed would refuse the bind.
	for _, s := range []string{GuestSocket, ClientSocket} {
		_ = os.Remove(filepath.Join(o.Dir, s))
	}
	if c.guestL, err = net.Listen("unix", c.GuestPath()); err != nil {
		c.file.close()
		return nil, err
	}
	if c.clientL, err = net.Listen("unix", filepath.Join(o.Dir, ClientSocket)); err != nil {
		c.guestL.Close()
		c.file.close()
		return nil, err
	}
	c.wg.Add(2)
	go c.acceptGuest()
	go c.acceptClients()
	return c, nil
}

// GuestPath is the socket qemu connects to.
func (c *Console) GuestPath() string { return filepath.Join(c.opts.Dir, GuestSocket) }

// SetPodLog turns the copy to the pod log on or off.
func (c *Console) SetPodLog(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.podLogOn && !on {
		c.podLog.flush()
	}
	c.podLogOn = on && c.podLog != nil
}

// acceptGuest takes qemu's connection, the first and only one, and reads
// the guest's output until qemu closes it.
func (c *Console) acceptGuest() {
	defer c.wg.Done()
	defer close(c.readerDone)
	conn, err := c.guestL.Accept()
	// One guest: nothing else may take its place.
	c.guestL.Close()
	_ = os.Remove(c.GuestPath())
	if err != nil {
		return
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		conn.Close()
		return
	}
	c.guest = conn
	c.mu.Unlock()
	buf := make([]byte, 4096)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			c.output(buf[:n])
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				c.log.Warn("Reading the serial console", "err", err)
			}
			return
		}
	}
}

// output hands the guest's output to the files, the pod log and the
// clients. Nothing here waits for a client.
func (c *Console) output(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.file.write(b); err != nil {
		c.log.Warn("Keeping the serial console's output", "err", err)
	}
	if c.podLogOn {
		c.podLog.write(b)
	}
	for cl := range c.clients {
		cl.out.push(b)
	}
}

// toGuest writes a client's input to the guest; without a guest (qemu has
// not connected yet) the input is lost.
func (c *Console) toGuest(b []byte) error {
	c.mu.Lock()
	g := c.guest
	c.mu.Unlock()
	if g == nil {
		return nil
	}
	_, err := g.Write(b)
	return err
}

// guestDrain is how long Close waits for the rest of the output of a qemu
// that has exited.
const guestDrain = time.Second

// Close stops serving: it reads what qemu (stopped before) still had to
// say, ends every client's connection and closes the files. The files
// stay.
func (c *Console) Close() error {
	c.guestL.Close()
	c.clientL.Close()
	select {
	case <-c.readerDone:
	case <-time.After(guestDrain):
	}
	c.mu.Lock()
	c.closed = true
	if c.guest != nil {
		c.guest.Close()
	}
	for cl := range c.clients {
		// The input ends now; the output still waiting gets a moment.
		now := time.Now()
		_ = cl.conn.SetReadDeadline(now)
		_ = cl.conn.SetWriteDeadline(now.Add(guestDrain))
	}
	if c.podLogOn {
		c.podLog.flush()
	}
	c.mu.Unlock()
	c.wg.Wait()
	return c.file.close()
}

// History is the kept output: OldLogFile's, then LogFile's.
func (c *Console) History() ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.file.history()
}

// ReadHistory reads the output kept in dir by a Console: a reader without
// its own socket, e.g. a test looking at the files of a runner.
func ReadHistory(dir string) ([]byte, error) {
	old, err := os.ReadFile(filepath.Join(dir, OldLogFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	cur, err := os.ReadFile(filepath.Join(dir, LogFile))
	if err != nil {
		return nil, fmt.Errorf("serial console output: %w", err)
	}
	return append(old, cur...), nil
}
