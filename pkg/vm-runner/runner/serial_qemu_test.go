package runner_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerexec"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testguest"
)

// TestGuestSerialConsole types on the guest's serial port through the
// runner's socket and vm-runner serial, and reads the guest's answers,
// the kept output and the pod log.
func TestGuestSerialConsole(t *testing.T) {
	v := newGuestVM(t, guestVM+"serialConsole:\n  podLog: true\n")
	v.boot()
	sock := filepath.Join(v.runtime, serialconsole.ClientSocket)

	conn, err := serialconsole.Dial(t.Context(), sock, runnerexec.ModeAttach, "tester@host")
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "ping hello\r")
	require.NoError(t, err)
	readUntil(t, conn, testguest.PongPrefix+"hello")

	// A second interactive client is refused, naming the first; a
	// follower sees the answer to the first's input too.
	_, err = serialconsole.Dial(t.Context(), sock, runnerexec.ModeAttach, "other")
	var inUse *serialconsole.InUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, "tester@host", inUse.Who)
	follower, err := serialconsole.Dial(t.Context(), sock, runnerexec.ModeFollow, "")
	require.NoError(t, err)
	defer follower.Close()
	_, err = io.WriteString(conn, "ping again\r")
	require.NoError(t, err)
	got := readUntil(t, follower, testguest.PongPrefix+"again")
	require.Contains(t, got, testguest.ReadyLine, "the kept output first")
	require.NoError(t, conn.Close())

	// vm-runner serial prints the kept output, boot to now.
	out, err := exec.Command(vmRunner(t), "serial", "-c", v.config).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), testguest.ReadyLine)
	require.Contains(t, string(out), testguest.PongPrefix+"again")

	// vm-runner serial --attach with a pipe for stdin: the user's input
	// reaches the guest, Ctrl-] leaves with exit 0.
	eventually.Succeeds(t, 5*time.Second, func() error { // the first client's slot frees
		c, err := serialconsole.Dial(t.Context(), sock, runnerexec.ModeAttach, "probe")
		if err == nil {
			c.Close()
		}
		return err
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, vmRunner(t), "serial", "-c", v.config, "--attach", "--who", "pipe")
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stdout syncbuffer.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	require.NoError(t, cmd.Start())
	_, err = io.WriteString(stdin, "ping piped\r")
	require.NoError(t, err)
	eventually.Succeeds(t, 30*time.Second, func() error {
		if !strings.Contains(stdout.String(), testguest.PongPrefix+"piped") {
			return fmt.Errorf("no answer on vm-runner serial --attach's stdout: %q", stdout.String())
		}
		return nil
	})
	_, err = stdin.Write([]byte{runnerexec.Escape})
	require.NoError(t, err)
	require.NoError(t, cmd.Wait(), "Ctrl-] leaves with exit 0: %s", stdout.String())
	require.True(t, strings.HasPrefix(stdout.String(), runnerexec.AttachedBanner+" of vm test; Ctrl-] to leave\n"), stdout.String())

	// The pod log (the runner's stdout) has the guest's lines.
	eventually.Succeeds(t, 5*time.Second, func() error {
		log, _ := os.ReadFile(v.output)
		if !bytes.Contains(log, []byte("[serial] "+testguest.PongPrefix+"piped\n")) {
			return fmt.Errorf("no guest lines in the runner's output")
		}
		return nil
	})
	log, _ := os.ReadFile(v.output)
	require.Contains(t, string(log), "[serial] "+testguest.ReadyLine+"\n", "from the boot on")
}

// readUntil reads r until what it read contains want.
func readUntil(t *testing.T, r net.Conn, want string) string {
	t.Helper()
	require.NoError(t, r.SetReadDeadline(time.Now().Add(30*time.Second)))
	var got []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(got, []byte(want)) {
		n, err := r.Read(buf)
		got = append(got, buf[:n]...)
		require.NoError(t, err, "reading for %q, got %q", want, got)
	}
	require.NoError(t, r.SetReadDeadline(time.Time{}))
	return string(got)
}
