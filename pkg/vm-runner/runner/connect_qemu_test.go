package runner_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/test/harness/testguest"
)

// userNet gives the test guest a NIC on qemu's user network that reaches
// nothing outside (restrict=on); host forwards work all the same.
var userNet = []string{
	"-netdev user,id=testnet,restrict=on",
	"-device virtio-net-pci,netdev=testnet",
}

// connection is one vm-runner connect process.
type connection struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
	stderr bytes.Buffer
}

func (v *vm) connect(t *testing.T, port int) *connection {
	t.Helper()
	c := &connection{cmd: exec.Command(vmRunner(t), "connect", "--port", fmt.Sprint(port), "-c", v.config)}
	var err error
	c.stdin, err = c.cmd.StdinPipe()
	require.NoError(t, err)
	out, err := c.cmd.StdoutPipe()
	require.NoError(t, err)
	c.stdout = out
	c.cmd.Stderr = &c.stderr
	require.NoError(t, c.cmd.Start())
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	})
	return c
}

// echo sends line and reads it back.
func (c *connection) echo(t *testing.T, line string) {
	t.Helper()
	_, err := io.WriteString(c.stdin, line)
	require.NoError(t, err)
	got := make([]byte, len(line))
	_, err = io.ReadFull(c.stdout, got)
	require.NoError(t, err, "stderr: %s", c.stderr.String())
	require.Equal(t, line, string(got))
}

// end closes stdin and waits for the process, returning its exit code.
func (c *connection) end(t *testing.T) int {
	t.Helper()
	require.NoError(t, c.stdin.Close())
	rest, _ := io.ReadAll(c.stdout)
	require.Empty(t, string(rest))
	_ = c.cmd.Wait()
	return c.cmd.ProcessState.ExitCode()
}

// hostForwards lists the host forwards of qemu's user network ("info
// usernet") to guest port port as their host ports.
func hostForwards(t *testing.T, mon *qmp.Monitor, port int) []string {
	t.Helper()
	out, err := mon.HumanMonitorCommand(t.Context(), "info usernet")
	require.NoError(t, err)
	re := regexp.MustCompile(fmt.Sprintf(`TCP\[HOST_FORWARD\]\s+\d+\s+127\.0\.0\.1\s+(\d+)\s+\S+\s+%d\s`, port))
	var ports []string
	for _, m := range re.FindAllStringSubmatch(out, -1) {
		ports = append(ports, m[1])
	}
	return ports
}

// TestConnect: vm-runner connect reaches the test guest's echo service
// through a host forward of qemu's user network, which the runner adds
// for the first connection to a port and removes after the last.
func TestConnect(t *testing.T) {
	g := testguest.Build(t)
	args := g.QemuArgs()
	extra := append([]string(nil), userNet...)
	for i := 0; i+1 < len(args); i += 2 {
		extra = append(extra, args[i]+" "+args[i+1])
	}
	v := newVM(t, guestVM, extra...)
	mon := v.boot()
	v.waitConsole(testguest.EchoLine, 30*time.Second)
	require.Empty(t, hostForwards(t, mon, testguest.EchoPort), "forwards before any connection")

	t.Run("echo", func(t *testing.T) {
		a := v.connect(t, testguest.EchoPort)
		a.echo(t, "hello from a\n")
		require.Len(t, hostForwards(t, mon, testguest.EchoPort), 1)
		b := v.connect(t, testguest.EchoPort)
		b.echo(t, "hello from b\n")
		a.echo(t, "a again\n")
		require.Len(t, hostForwards(t, mon, testguest.EchoPort), 1, "two connections share the forward")

		require.Equal(t, 0, a.end(t), "stderr: %s", a.stderr.String())
		b.echo(t, "b after a's end\n")
		require.Len(t, hostForwards(t, mon, testguest.EchoPort), 1, "the forward stays while b uses it")
		require.Equal(t, 0, b.end(t), "stderr: %s", b.stderr.String())
		eventually.Succeeds(t, 5*time.Second, func() error {
			if f := hostForwards(t, mon, testguest.EchoPort); len(f) > 0 {
				return fmt.Errorf("host forwards after the last connection: %v", f)
			}
			return nil
		})
		// The runner logs a removal after qemu has done it.
		eventually.Succeeds(t, 5*time.Second, func() error {
			if n := v.logCount(`msg="Guest port forward removed"`) + v.logCount(`msg="Guest port forwarded"`); n != 2 {
				return fmt.Errorf("%d log lines of forwards added and removed, want 2", n)
			}
			return nil
		})
	})

	t.Run("many bytes and a half-closed stdin", func(t *testing.T) {
		data := make([]byte, 1<<20)
		_, _ = rand.Read(data)
		cmd := exec.Command(vmRunner(t), "connect", "--port", fmt.Sprint(testguest.EchoPort), "-c", v.config)
		cmd.Stdin = bytes.NewReader(data)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		start := time.Now()
		require.NoError(t, cmd.Run(), "stderr: %s", stderr.String())
		t.Logf("1 MiB there and back in %v", time.Since(start).Round(time.Millisecond))
		require.True(t, bytes.Equal(data, out.Bytes()), "the echo of 1 MiB (got %d bytes)", out.Len())
	})

	t.Run("a port nobody listens on", func(t *testing.T) {
		c := v.connect(t, 8)
		err := c.cmd.Wait()
		require.Error(t, err)
		require.Equal(t, 1, c.cmd.ProcessState.ExitCode())
		require.Equal(t, "vm-runner connect: guest port 8: the connection was closed before the guest sent anything: does a service listen on port 8 in the guest?\n", c.stderr.String())
		eventually.Succeeds(t, 5*time.Second, func() error {
			if f := hostForwards(t, mon, 8); len(f) > 0 {
				return fmt.Errorf("host forwards after the refused connection: %v", f)
			}
			return nil
		})
	})

	t.Run("bad port", func(t *testing.T) {
		for _, port := range []string{"0", "65536", "-1"} {
			out, err := exec.Command(vmRunner(t), "connect", "--port", port, "-c", v.config).CombinedOutput()
			require.Error(t, err)
			require.Equal(t, "vm-runner connect: --port "+port+": must be a number from 1 to 65535\n", string(out))
		}
	})
}

// TestConnectWithoutNetwork: a guest without user networking is reached
// at the address its agent reports; without one, the user is told.
func TestConnectWithoutNetwork(t *testing.T) {
	v := newGuestVM(t, guestVM)
	out, err := exec.Command(vmRunner(t), "connect", "--port", "22", "-c", v.config).CombinedOutput()
	require.Error(t, err, "before the VM runs")
	require.Regexp(t, `^vm-runner connect: no runner answers on \S+/runner.sock \(is the VM running\?\): `, string(out))

	v.boot()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err = exec.CommandContext(ctx, vmRunner(t), "connect", "--port", "22", "-c", v.config).CombinedOutput()
	require.Error(t, err)
	require.True(t, strings.HasPrefix(string(out), "vm-runner connect: the guest has no user-mode network and its guest agent has reported no address yet"), "%s", out)
}
