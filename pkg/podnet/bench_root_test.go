package podnet

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/procmem"
	"github.com/vmop/vmop/test/harness/testguest"
)

// benchMAC is the test guest's NIC, which the DHCP server answers.
const benchMAC = "52:54:00:be:9c:01"

// echoBytes go to the guest's echo service and back per round.
const echoBytes = 4 << 20

// BenchmarkGuestEcho is TCP throughput from the host to the test guest's
// echo service and back, under TCG: through a pod network (the host
// reaches the pod's IP on a veth, NAT to the guest's tap) and through
// qemu's user network with a host forward on 127.0.0.1, the way into a
// user-network guest. It also reports qemu's resident memory, where a
// user network's slirp lives; a pod network's part in the runner is its
// DHCP server (qemu-rss-MiB and the kernel's tap and nftables table).
func BenchmarkGuestEcho(b *testing.B) {
	g := testguest.Build(b).WithAppend(testguest.DHCP)
	b.Run("pod-network", func(b *testing.B) {
		p := newPod(b)
		p.serve(b, Options{Net: netip.MustParsePrefix("10.0.2.0/24"), MAC: benchMAC})
		qemu := startGuest(b, g, []string{"ip", "netns", "exec", p.ns},
			"-netdev", "tap,id=n,ifname="+Tap+",script=no,downscript=no", "-device", "virtio-net-pci,netdev=n,mac="+benchMAC)
		benchEcho(b, qemu, "10.98.7.2:7")
	})
	b.Run("user-hostfwd", func(b *testing.B) {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		require.NoError(b, err)
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		qemu := startGuest(b, g, nil,
			"-netdev", fmt.Sprintf("user,id=n,restrict=on,hostfwd=tcp:127.0.0.1:%d-:7", port), "-device", "virtio-net-pci,netdev=n,mac="+benchMAC)
		benchEcho(b, qemu, "127.0.0.1:"+strconv.Itoa(port))
	})
}

// qemuGuest is a guest that startGuest booted.
type qemuGuest struct {
	cmd *exec.Cmd
	dir string       // its serial console: the socket console, the file console.log
	out bytes.Buffer // qemu's own output
}

// startGuest boots g with qemu (behind prefix, a command such as ip netns
// exec) and waits until its echo service listens.
func startGuest(tb testing.TB, g testguest.Guest, prefix []string, nic ...string) *qemuGuest {
	q := &qemuGuest{dir: tb.TempDir()}
	args := append(prefix, "qemu-system-x86_64", "-nodefaults", "-display", "none", "-no-reboot",
		"-machine", "q35,accel="+testguest.Accel(), "-cpu", "max", "-m", "256",
		"-chardev", "socket,id=con,server=on,wait=off,path="+filepath.Join(q.dir, "console")+",logfile="+filepath.Join(q.dir, "console.log"),
		"-serial", "chardev:con")
	args = append(append(args, nic...), g.QemuArgs()...)
	q.cmd = exec.Command(args[0], args[1:]...)
	q.cmd.Stdout, q.cmd.Stderr = &q.out, &q.out
	require.NoError(tb, q.cmd.Start())
	tb.Cleanup(func() {
		_ = q.cmd.Process.Kill()
		_ = q.cmd.Wait()
	})
	q.wait(tb, testguest.EchoLine)
	return q
}

// wait waits until the guest's console has line.
func (q *qemuGuest) wait(tb testing.TB, line string) {
	tb.Helper()
	eventually.Within(tb, time.Minute, func() string {
		log, _ := os.ReadFile(filepath.Join(q.dir, "console.log"))
		if strings.Contains(string(log), line) {
			return ""
		}
		return fmt.Sprintf("no %q yet; qemu: %s; console:\n%s", line, q.out.String(), log)
	})
}

// typeLine types line on the guest's console. The connection stays
// open: qemu drops what the guest's UART has not taken when it closes.
func (q *qemuGuest) typeLine(tb testing.TB, line string) {
	tb.Helper()
	c, err := net.Dial("unix", filepath.Join(q.dir, "console"))
	require.NoError(tb, err)
	tb.Cleanup(func() { c.Close() })
	_, err = io.WriteString(c, line+"\r")
	require.NoError(tb, err)
}

// benchEcho sends echoBytes per round to addr and reads them back.
func benchEcho(b *testing.B, qemu *qemuGuest, addr string) {
	// The guest prints its echo line as it starts nc, which may not listen
	// yet.
	eventually.Within(b, 30*time.Second, func() string {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err.Error()
		}
		c.Close()
		return ""
	})
	data := bytes.Repeat([]byte("0123456789abcdef"), echoBytes/16)
	got := make([]byte, len(data))
	b.SetBytes(2 * echoBytes) // there and back
	b.ResetTimer()
	for b.Loop() {
		c, err := net.DialTimeout("tcp", addr, 20*time.Second)
		require.NoError(b, err)
		require.NoError(b, c.SetDeadline(time.Now().Add(5*time.Minute)))
		sent := make(chan error, 1)
		go func() {
			_, err := c.Write(data)
			sent <- err
		}()
		_, err = io.ReadFull(c, got)
		require.NoError(b, err)
		require.NoError(b, <-sent)
		c.Close()
	}
	b.StopTimer()
	require.Equal(b, data, got)
	// ip netns exec execs qemu: the pid is qemu's either way.
	rss, err := procmem.RSS(qemu.cmd.Process.Pid)
	require.NoError(b, err)
	b.ReportMetric(float64(rss)/(1<<20), "qemu-rss-MiB")
}
