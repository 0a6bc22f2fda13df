package serialconsole_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerexec"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
	"github.com/vmop/vmop/test/harness/syncbuffer"
)

// console is a Console with a fake qemu connected to its guest socket.
type console struct {
	*serialconsole.Console
	dir   string
	guest net.Conn
}

func newConsole(t *testing.T, o serialconsole.Options) *console {
	t.Helper()
	o.Dir = t.TempDir()
	c, err := serialconsole.Listen(o)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	guest, err := net.Dial("unix", c.GuestPath())
	require.NoError(t, err)
	t.Cleanup(func() { guest.Close() })
	return &console{Console: c, dir: o.Dir, guest: guest}
}

func (c *console) dial(t *testing.T, mode runnerexec.Mode, who string) (net.Conn, error) {
	t.Helper()
	conn, err := serialconsole.Dial(t.Context(), filepath.Join(c.dir, serialconsole.ClientSocket), mode, who)
	if err == nil {
		t.Cleanup(func() { conn.Close() })
	}
	return conn, err
}

func (c *console) write(t *testing.T, s string) {
	t.Helper()
	_, err := io.WriteString(c.guest, s)
	require.NoError(t, err)
}

// readUntil reads r until what it read contains want.
func readUntil(t *testing.T, r net.Conn, want string) string {
	t.Helper()
	require.NoError(t, r.SetReadDeadline(time.Now().Add(5*time.Second)))
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte(want)) {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		require.NoError(t, err, "reading for %q, got %d bytes ending in %q", want, len(got), got[max(0, len(got)-200):])
	}
	require.NoError(t, r.SetReadDeadline(time.Time{}))
	return string(got)
}

func TestOneInteractiveClient(t *testing.T) {
	c := newConsole(t, serialconsole.Options{})
	first, err := c.dial(t, runnerexec.ModeAttach, "alice@laptop")
	require.NoError(t, err)

	_, err = c.dial(t, runnerexec.ModeAttach, "bob@desk")
	var inUse *serialconsole.InUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, "alice@laptop", inUse.Who)
	require.WithinDuration(t, time.Now(), inUse.Since, 10*time.Second)
	require.Regexp(t, `^the serial console is in use: alice@laptop is attached \(since \d\d:\d\d:\d\d UTC\); one interactive client at a time$`, err.Error())

	// Followers are welcome meanwhile.
	_, err = c.dial(t, runnerexec.ModeFollow, "carol")
	require.NoError(t, err)

	// The first one's input reaches the guest, and the guest's answer the
	// first one.
	_, err = io.WriteString(first, "ping hello\r")
	require.NoError(t, err)
	readUntil(t, c.guest, "ping hello\r")
	c.write(t, "PONG hello\r\n")
	readUntil(t, first, "PONG hello")

	// Once it leaves, the next may attach.
	require.NoError(t, first.Close())
	require.Eventually(t, func() bool {
		conn, err := c.dial(t, runnerexec.ModeAttach, "bob@desk")
		if err == nil {
			conn.Close()
		}
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
}

func TestFollowersSeeKeptAndNewOutput(t *testing.T) {
	c := newConsole(t, serialconsole.Options{})
	c.write(t, "early boot\r\n")
	require.Eventually(t, func() bool {
		h, _ := c.History()
		return string(h) == "early boot\r\n"
	}, 5*time.Second, 10*time.Millisecond)

	var followers []net.Conn
	for range 3 {
		f, err := c.dial(t, runnerexec.ModeFollow, "")
		require.NoError(t, err)
		followers = append(followers, f)
	}
	attached, err := c.dial(t, runnerexec.ModeAttach, "")
	require.NoError(t, err)
	c.write(t, "login: ")
	for _, f := range followers {
		require.Equal(t, "early boot\r\nlogin: ", readUntil(t, f, "login: "), "the kept output, then the new, once each")
		// A follower's input goes nowhere.
		_, err := io.WriteString(f, "root\r")
		require.NoError(t, err)
	}
	require.Equal(t, "login: ", readUntil(t, attached, "login: "), "an interactive client gets the new output only")

	// runnerexec.ModeHistory gets the kept output and the end.
	h, err := c.dial(t, runnerexec.ModeHistory, "")
	require.NoError(t, err)
	all, err := io.ReadAll(h)
	require.NoError(t, err)
	require.Equal(t, "early boot\r\nlogin: ", string(all))

	// Nothing of the followers reached the guest.
	require.NoError(t, c.guest.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
	n, _ := c.guest.Read(make([]byte, 16))
	require.Zero(t, n)
}

func TestSlowFollowerDoesNotBlock(t *testing.T) {
	c := newConsole(t, serialconsole.Options{LogSize: 64 << 10})
	slow, err := c.dial(t, runnerexec.ModeFollow, "")
	require.NoError(t, err)
	fast, err := c.dial(t, runnerexec.ModeFollow, "")
	require.NoError(t, err)
	var fastGot syncbuffer.Buffer
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = io.Copy(&fastGot, fast) })

	// 8 MiB, far more than a client may have waiting and the socket
	// buffers hold, while the slow follower reads nothing.
	line := strings.Repeat("x", 1023) + "\n"
	wrote := make(chan error, 1)
	go func() {
		var err error
		for i := 0; i < 8<<10 && err == nil; i++ {
			_, err = io.WriteString(c.guest, line)
		}
		wrote <- err
	}()
	select {
	case err := <-wrote:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("the guest's output is held up by a follower that does not read")
	}

	// The slow one lost output and is told so where it is missing.
	got := drain(t, slow)
	require.Less(t, len(got), 2<<20, "the slow follower got at most what may wait for it plus the socket's buffers")

	// Both get what comes once they have caught up.
	require.Eventually(t, func() bool {
		n := fastGot.Len()
		time.Sleep(200 * time.Millisecond)
		return fastGot.Len() == n
	}, 20*time.Second, time.Millisecond)
	c.write(t, "LATE\r\n")
	got += readUntil(t, slow, "LATE\r\n")
	require.True(t, strings.HasSuffix(got, "LATE\r\n"))
	// Where the output broke off; the last break may be right before LATE.
	require.Regexp(t, `\[vm-runner: \d+ bytes of the guest's output dropped here: this client read too slowly\]\r\n`, got)
	require.NoError(t, c.Close())
	wg.Wait()
	require.True(t, strings.HasSuffix(fastGot.String(), "LATE\r\n"), "the other follower got the end")
}

// drain reads r until nothing comes for a while.
func drain(t *testing.T, r net.Conn) string {
	t.Helper()
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		require.NoError(t, r.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			require.NoError(t, r.SetReadDeadline(time.Time{}))
			return string(got)
		}
		require.NoError(t, err)
	}
}

func TestKeptOutputRotates(t *testing.T) {
	c := newConsole(t, serialconsole.Options{LogSize: 100})
	var all strings.Builder
	for i := range 25 {
		s := strings.Repeat(string(rune('a'+i)), 10)
		all.WriteString(s)
		c.write(t, s)
	}
	want := all.String()[100:] // 250 bytes: the last full file and the 50 after it
	require.Eventually(t, func() bool {
		h, _ := c.History()
		return string(h) == want
	}, 5*time.Second, 10*time.Millisecond)
	old, err := os.ReadFile(filepath.Join(c.dir, serialconsole.OldLogFile))
	require.NoError(t, err)
	require.Len(t, old, 100)
	cur, err := os.ReadFile(filepath.Join(c.dir, serialconsole.LogFile))
	require.NoError(t, err)
	require.Len(t, cur, 50)
	files, err := serialconsole.ReadHistory(c.dir)
	require.NoError(t, err)
	require.Equal(t, want, string(files))
}

func TestPodLog(t *testing.T) {
	var out syncbuffer.Buffer
	c := newConsole(t, serialconsole.Options{PodLog: &out, PodLogPrefix: "[serial] "})
	c.write(t, "not copied\r\n")
	waitHistory(t, c, "not copied\r\n")
	c.SetPodLog(true)
	c.write(t, "Booting\r\nlogin: ")
	waitHistory(t, c, "login: ")
	require.Equal(t, "[serial] Booting\n", out.String(), "whole lines only")
	c.write(t, "root\r\n")
	waitHistory(t, c, "root\r\n")
	require.Equal(t, "[serial] Booting\n[serial] login: root\n", out.String())
	c.write(t, "half")
	waitHistory(t, c, "half")
	c.SetPodLog(false) // the half line is not left hanging
	c.write(t, " a line\r\n")
	waitHistory(t, c, " a line\r\n")
	require.Equal(t, "[serial] Booting\n[serial] login: root\n[serial] half\n", out.String())
}

func waitHistory(t *testing.T, c *console, suffix string) {
	t.Helper()
	require.Eventually(t, func() bool {
		h, _ := c.History()
		return strings.HasSuffix(string(h), suffix)
	}, 5*time.Second, 5*time.Millisecond)
}

func TestCloseEndsClients(t *testing.T) {
	c := newConsole(t, serialconsole.Options{})
	f, err := c.dial(t, runnerexec.ModeFollow, "")
	require.NoError(t, err)
	a, err := c.dial(t, runnerexec.ModeAttach, "")
	require.NoError(t, err)
	c.write(t, "bye\r\n")
	c.guest.Close() // qemu exits
	require.NoError(t, c.Close())
	for _, conn := range []net.Conn{f, a} {
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
		rest, err := io.ReadAll(conn)
		require.NoError(t, err, "the runner ends the connection")
		if conn == f {
			require.Equal(t, "bye\r\n", string(rest))
		}
	}
	_, err = c.dial(t, runnerexec.ModeFollow, "")
	require.Error(t, err, "a closed console takes no clients")
}

func TestWhoIsCleaned(t *testing.T) {
	c := newConsole(t, serialconsole.Options{})
	_, err := c.dial(t, runnerexec.ModeAttach, "mallory\x1b[2J\r\nfake prompt")
	require.NoError(t, err)
	_, err = c.dial(t, runnerexec.ModeAttach, "")
	var inUse *serialconsole.InUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, "mallory[2Jfake prompt", inUse.Who, "no control characters reach another's terminal")
}
