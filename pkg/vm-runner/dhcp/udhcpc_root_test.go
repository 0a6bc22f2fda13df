package dhcp

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/syncbuffer"
)

// These tests run busybox's udhcpc, a real DHCP client, in a network
// namespace of its own, on one end of a veth pair; the server runs in this
// process on the other end, in this namespace, as vm-runner's does on a
// tap device.

func TestUdhcpcGetsLease(t *testing.T) {
	requireTools(t)
	full := Lease{
		MAC:      mustMAC(t, "02:00:5e:00:01:01"),
		Addr:     netip.MustParsePrefix("192.0.2.15/24"),
		Router:   netip.MustParseAddr("192.0.2.1"),
		DNS:      []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("192.0.2.54")},
		Search:   []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Domain:   "cluster.local",
		Hostname: "test-vm",
		MTU:      1400,
		Duration: time.Hour,
	}
	minimal := Lease{
		MAC:      mustMAC(t, "02:00:5e:00:01:02"),
		Addr:     netip.MustParsePrefix("198.51.100.7/25"),
		Router:   netip.MustParseAddr("198.51.100.1"),
		Duration: 90 * time.Second,
	}
	// Both servers listen on port 67 of this namespace at once, each on
	// its own interface; the first interface has the router's address, as
	// a client renewing its lease sends its request there, the second has
	// no address at all.
	fullLink := newLink(t, "f", full.MAC)
	run(t, "ip", "addr", "add", "192.0.2.1/24", "dev", fullLink.host)
	minimalLink := newLink(t, "m", minimal.MAC)
	fullLogs := serve(t, fullLink.host, full)
	serve(t, minimalLink.host, minimal)

	t.Run("full", func(t *testing.T) {
		t.Parallel()
		want := map[string]string{
			"ip":       "192.0.2.15",
			"subnet":   "255.255.255.0",
			"mask":     "24",
			"router":   "192.0.2.1",
			"serverid": "192.0.2.1",
			"dns":      "192.0.2.53 192.0.2.54",
			"search":   "default.svc.cluster.local svc.cluster.local cluster.local",
			"domain":   "cluster.local",
			"hostname": "test-vm",
			"mtu":      "1400",
			"lease":    "3600",
		}
		// Without -q udhcpc stays, and on SIGUSR1 renews the lease: a
		// request from its address to the server's, whose ACK goes back
		// to that address. (udhcpc at times misses that first ACK and
		// asks again by broadcast; that ACK goes to its address too.)
		c := startUdhcpc(t, fullLink, "-t", "5", "-T", "1")
		require.Equal(t, want, c.waitEvent(t, "bound"))
		c.signal(t, syscall.SIGUSR1)
		require.Equal(t, want, c.waitEvent(t, "renew"))
		require.Contains(t, fullLogs.String(), "to=192.0.2.15:68")
	})
	t.Run("minimal", func(t *testing.T) {
		t.Parallel()
		c := startUdhcpc(t, minimalLink, "-q", "-n", "-t", "5", "-T", "1")
		require.NoError(t, c.wait(), "udhcpc: %s", c.output)
		require.Equal(t, map[string]string{
			"ip":       "198.51.100.7",
			"subnet":   "255.255.255.128",
			"mask":     "25",
			"router":   "198.51.100.1",
			"serverid": "198.51.100.1",
			"dns":      "",
			"search":   "",
			"domain":   "",
			"hostname": "",
			"mtu":      "",
			"lease":    "90",
		}, c.waitEvent(t, "bound"))
	})
}

func TestUdhcpcOtherMACGetsNothing(t *testing.T) {
	requireTools(t)
	lease := Lease{
		MAC:      mustMAC(t, "02:00:5e:00:02:01"),
		Addr:     netip.MustParsePrefix("192.0.2.15/24"),
		Router:   netip.MustParseAddr("192.0.2.1"),
		Duration: time.Hour,
	}
	l := newLink(t, "o", mustMAC(t, "02:00:5e:00:02:02"))
	logs := serve(t, l.host, lease)

	c := startUdhcpc(t, l, "-q", "-n", "-t", "2", "-T", "1")
	require.Error(t, c.wait(), "udhcpc got a lease for another MAC: %s", c.output)
	require.NoFileExists(t, filepath.Join(c.dir, "bound"))
	// The server did see the client, and ignored it.
	require.Contains(t, logs.String(), `msg="Ignoring another client" interface=`+l.host+` mac=02:00:5e:00:02:01 client=02:00:5e:00:02:02 type=DISCOVER`)
}

func requireTools(t *testing.T) {
	t.Helper()
	prereq.Root(t, "creates veth pairs and network namespaces, and listens on port 67")
	prereq.Commands(t, "iproute2, busybox", "ip", "busybox")
	list, err := exec.Command("busybox", "--list").Output()
	if err != nil || !strings.Contains("\n"+string(list), "\nudhcpc\n") {
		t.Fatalf("busybox has no udhcpc applet (err %v): install busybox-static", err)
	}
}

// link is a veth pair: host in this network namespace, guest in netns.
type link struct{ host, guest, netns string }

// newLink makes a link whose guest end has mac, up to the test's end.
// Names carry the process id (at most 7 digits: with "vmopd", the tag and
// a or b within the 15 bytes of an interface name), so that parallel test
// runs do not clash.
func newLink(t *testing.T, tag string, mac net.HardwareAddr) link {
	t.Helper()
	name := fmt.Sprintf("vmopd%d%s", os.Getpid(), tag)
	l := link{host: name + "a", guest: name + "b", netns: name}
	// What a killed run of a process with the same id left.
	_ = exec.Command("ip", "link", "del", l.host).Run()
	_ = exec.Command("ip", "netns", "del", l.netns).Run()

	run(t, "ip", "netns", "add", l.netns)
	t.Cleanup(func() { run(t, "ip", "netns", "del", l.netns) })
	run(t, "ip", "link", "add", l.host, "type", "veth", "peer", "name", l.guest, "netns", l.netns)
	t.Cleanup(func() {
		// Gone with the namespace, when that went first.
		_ = exec.Command("ip", "link", "del", l.host).Run()
	})
	run(t, "ip", "-n", l.netns, "link", "set", "dev", l.guest, "address", mac.String(), "up")
	run(t, "ip", "link", "set", "dev", l.host, "up")
	return l
}

func run(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(args, " "), out)
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	mac, err := net.ParseMAC(s)
	require.NoError(t, err)
	return mac
}

// serve runs Serve on iface until the test ends, and returns its log.
func serve(t *testing.T, iface string, lease Lease) *syncbuffer.Buffer {
	t.Helper()
	logs := &syncbuffer.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- listenAndServe(ctx, iface, lease, log) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err, "Serve on %s", iface)
		case <-time.After(5 * time.Second):
			t.Errorf("Serve on %s did not return when its context ended", iface)
		}
		t.Logf("server on %s:\n%s", iface, logs)
	})
	eventually.Within(t, 5*time.Second, func() string {
		select {
		case err := <-done:
			done <- err // for the cleanup
			t.Fatalf("Serve on %s: %v", iface, err)
		default:
		}
		if !strings.Contains(logs.String(), "Serving DHCP") {
			return "Serve on " + iface + " is not listening"
		}
		return ""
	})
	return logs
}

// script is udhcpc's script: on bound and renew it writes the variables
// udhcpc passes to DIR/<event>, and on bound sets the address, as a real
// script does, so that a renewal can go by unicast.
const script = `#!/bin/sh
case "$1" in
bound) ip addr add "$ip/$mask" dev "$interface" || exit 1 ;;
renew) ;;
*) exit 0 ;;
esac
printf '%s=%s\n' ip "$ip" subnet "$subnet" mask "$mask" router "$router" \
	serverid "$serverid" dns "$dns" search "$search" domain "$domain" \
	hostname "$hostname" mtu "$mtu" lease "$lease" >DIR/"$1".tmp
mv DIR/"$1".tmp DIR/"$1"
`

type udhcpc struct {
	cmd    *exec.Cmd
	dir    string
	output *syncbuffer.Buffer
	done   chan error
}

// startUdhcpc runs udhcpc with args on l's guest end, up to the test's end.
func startUdhcpc(t *testing.T, l link, args ...string) *udhcpc {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "script")
	require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(script, "DIR", dir)), 0o755))
	c := &udhcpc{dir: dir, output: &syncbuffer.Buffer{}, done: make(chan error, 1)}
	args = append([]string{"netns", "exec", l.netns, "busybox", "udhcpc", "-f", "-i", l.guest,
		"-s", path, "-p", filepath.Join(dir, "pid")}, args...)
	c.cmd = exec.Command("ip", args...)
	c.cmd.Stdout, c.cmd.Stderr = c.output, c.output
	require.NoError(t, c.cmd.Start())
	go func() { c.done <- c.cmd.Wait() }()
	t.Cleanup(func() {
		_ = c.cmd.Process.Kill()
		err := <-c.done
		t.Logf("udhcpc on %s (%v): %s", l.guest, err, c.output)
	})
	return c
}

// wait waits for udhcpc to exit.
func (c *udhcpc) wait() error {
	select {
	case err := <-c.done:
		c.done <- err
		return err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("udhcpc still runs after 30s")
	}
}

// waitEvent waits for the script's variables of event.
func (c *udhcpc) waitEvent(t *testing.T, event string) map[string]string {
	t.Helper()
	path := filepath.Join(c.dir, event)
	eventually.Within(t, 30*time.Second, func() string {
		if _, err := os.Stat(path); err != nil {
			return fmt.Sprintf("no %s event from udhcpc: %v; its output: %s", event, err, c.output)
		}
		return ""
	})
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	vars := map[string]string{}
	for s := bufio.NewScanner(f); s.Scan(); {
		k, v, _ := strings.Cut(s.Text(), "=")
		vars[k] = v
	}
	return vars
}

// signal sends sig to udhcpc, by its pid file: ip netns exec may not be
// udhcpc's own process.
func (c *udhcpc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "pid"))
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscan(string(b), &pid)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, sig))
}
