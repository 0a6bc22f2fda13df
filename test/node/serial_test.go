package node

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerexec"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/ptytest"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testguest"
)

// serialConsole uses the running VM's serial console as a user at a
// terminal does, with the real kubectl through the API server and the
// kubelet: kubectl vm logs shows the boot, kubectl vm console --serial
// under a pseudo-terminal types to the guest and reads its answer, a
// second client is refused meanwhile, logs -f follows, and Ctrl-] leaves.
func serialConsole(t *testing.T, ns, vm string) {
	logs := kubectl(t, "", "vm", "logs", "-n", ns, vm)
	require.Contains(t, logs, testguest.ReadyLine, "kubectl vm logs: the guest's boot")
	t.Logf("kubectl vm logs -n %s %s:\n%s", ns, vm, logs)

	term := attachSerial(t, ns, vm)
	term.write(t, "ping hello\r")
	term.wait(t, testguest.PongPrefix+"hello")

	t.Run("second client refused", func(t *testing.T) {
		out, errOut, err := kubectlResult(t.Context(), "ping intruder\r", "vm", "console", "--serial", "-n", ns, vm)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, "stdout: %s\nstderr: %s", out, errOut)
		require.Regexp(t, `^error: vm `+ns+`/`+vm+`: the serial console is in use: \S+@\S+ is attached \(since \d\d:\d\d:\d\d UTC\); one interactive client at a time\n$`, errOut)
		require.Empty(t, out)
		t.Logf("a second kubectl vm console --serial:\n%s", errOut)
	})

	t.Run("logs follow", func(t *testing.T) {
		follow := kubectlCmd(t.Context(), "vm", "logs", "-f", "-n", ns, vm)
		var out syncbuffer.Buffer
		follow.Stdout, follow.Stderr = &out, &out
		require.NoError(t, follow.Start())
		// Resized while attached: the session goes on.
		ptytest.Resize(t, term.pty, 132, 43)
		term.write(t, "ping follow\r")
		eventually.Within(t, time.Minute, func() string {
			if strings.Contains(out.String(), testguest.PongPrefix+"follow") {
				return ""
			}
			return fmt.Sprintf("kubectl vm logs -f shows:\n%s", out.String())
		})
		require.Contains(t, out.String(), testguest.ReadyLine, "the kept output first")
		term.wait(t, testguest.PongPrefix+"follow")
		require.NoError(t, follow.Process.Signal(os.Interrupt))
		require.NoError(t, follow.Wait(), "Ctrl-C ends logs -f: %s", out.String())
	})

	term.leave(t)
	require.NotContains(t, term.screen.String(), "intruder", "the refused client's input reached no one")
	t.Logf("kubectl vm console --serial under a terminal:\n%s", term.screen.String())

	// The slot is free again, and input from a pipe works too.
	_, errOut, err := kubectlResult(t.Context(), "ping piped\r", "vm", "console", "--serial", "-n", ns, vm)
	require.NoError(t, err, errOut)
	require.Equal(t, fmt.Sprintf("Connected to the serial console of vm %s/%s; Ctrl-] to leave\n", ns, vm), errOut)
	eventually.Within(t, time.Minute, func() string {
		out, _, err := kubectlResult(t.Context(), "", "vm", "logs", "-n", ns, vm)
		if err == nil && strings.Contains(out, testguest.PongPrefix+"piped") {
			return ""
		}
		return fmt.Sprintf("no answer to the piped ping in kubectl vm logs (%v):\n%s", err, out)
	})
}

// serialTerminal is kubectl vm console --serial under a pseudo-terminal,
// as in a terminal emulator.
type serialTerminal struct {
	pty    *os.File
	screen syncbuffer.Buffer
	exited chan error
}

// attachSerial runs kubectl vm console --serial for VM ns/vm, with more
// flags, on a new pseudo-terminal, and waits until it says it is
// connected. The test's cleanup kills it unless leave ended it.
func attachSerial(t *testing.T, ns, vm string, flags ...string) *serialTerminal {
	t.Helper()
	pty, tty := ptytest.Open(t)
	cmd := kubectlCmd(t.Context(), append([]string{"vm", "console", "--serial", "-n", ns, vm}, flags...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// The terminal is the session's, as in a terminal emulator: resizes
	// signal kubectl and the plugin.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	require.NoError(t, cmd.Start())
	tty.Close()
	s := &serialTerminal{pty: pty, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if s.exited != nil {
			_ = cmd.Process.Kill()
			<-s.exited //nolint:errcheck // killed just now
		}
	})
	go func() { _, _ = io.Copy(&s.screen, pty) }()
	s.wait(t, fmt.Sprintf("Connected to the serial console of vm %s/%s; Ctrl-] to leave\r\n", ns, vm))
	return s
}

// wait waits until the terminal shows want; t is the (sub)test waiting.
func (s *serialTerminal) wait(t testing.TB, want string) {
	t.Helper()
	eventually.Within(t, time.Minute, func() string {
		if strings.Contains(s.screen.String(), want) {
			return ""
		}
		return fmt.Sprintf("no %q on the terminal; it shows:\n%q", want, s.screen.String())
	})
}

// write types in on the terminal.
func (s *serialTerminal) write(t testing.TB, in string) {
	t.Helper()
	_, err := s.pty.WriteString(in)
	require.NoError(t, err)
}

// leave types Ctrl-], which must end the command with exit code 0.
func (s *serialTerminal) leave(t testing.TB) {
	t.Helper()
	s.write(t, string([]byte{runnerexec.Escape}))
	select {
	case err := <-s.exited:
		s.exited = nil
		require.NoError(t, err, "Ctrl-] leaves with exit 0; the terminal shows:\n%q", s.screen.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("kubectl vm console --serial did not end after Ctrl-]; the terminal shows:\n%q", s.screen.String())
	}
}
