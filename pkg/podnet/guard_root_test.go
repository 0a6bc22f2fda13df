package podnet

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vmop/vmop/test/harness/testguest"
)

// guardMAC is the guest's NIC in the guard's tests; otherMAC another.
var (
	guardMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x9a, 0x00, 0x01}
	otherMAC = net.HardwareAddr{0x52, 0x54, 0x00, 0x9a, 0x00, 0x02}
)

// TestGuestSpoofing: what a guest sends into its tap leaves the pod only
// from its own address and MAC. A fake guest writes frames into the tap
// as qemu would, and a capture on the pod's interface sees what leaves:
// its own UDP (masqueraded), never one from another pod's address, another
// address of the guest's net, another MAC, or IPv6 (the pod network is
// IPv4 only), even where the pod forwards IPv6. Inside the pod, the pod's
// DHCP server and ARP answer the guest, and no one else.
func TestGuestSpoofing(t *testing.T) {
	p := newPod(t)
	p.serve(t, Options{Net: netip.MustParsePrefix("10.0.2.0/24"), MAC: guardMAC.String()})
	// The pod has IPv6 too and forwards it (on every interface, the tap's
	// included), as a dual-stack CNI may set up.
	run(t, "ip", "addr", "add", "fd00:98:7::1/64", "dev", p.host, "nodad")
	p.run(t, "ip", "addr", "add", "fd00:98:7::2/64", "dev", "eth0", "nodad")
	p.run(t, "ip", "-6", "route", "add", "default", "via", "fd00:98:7::1")
	p.run(t, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1")
	// Neighbours resolved: what is forwarded leaves at once.
	p.run(t, "busybox", "ping", "-c", "1", "-W", "5", "fd00:98:7::1")
	p.run(t, "busybox", "ping", "-c", "1", "-W", "5", "10.98.7.1")
	g := p.fakeGuest(t)

	guest, gw, pod := netip.MustParseAddr("10.0.2.15"), netip.MustParseAddr("10.0.2.2"), netip.MustParseAddr("10.98.7.1")
	capture := testguest.Capture(t, []string{"ip", "netns", "exec", p.ns}, "eth0", "-Q", "out", "udp")
	// To the node's side of the pod's interface, each on a port of its own.
	g.send(t, guardMAC, udp4(guest, pod, 9001))
	g.send(t, guardMAC, udp4(netip.MustParseAddr("10.98.7.3"), pod, 9002)) // another pod's
	g.send(t, guardMAC, udp4(netip.MustParseAddr("10.0.2.99"), pod, 9003)) // the guest's net
	g.send(t, otherMAC, udp4(guest, pod, 9004))
	g.send(t, guardMAC, udp6(netip.MustParseAddr("fd00:98:7::99"), netip.MustParseAddr("fd00:98:7::1"), 9005))
	time.Sleep(time.Second)
	out := capture()
	t.Logf("what left the pod's eth0:\n%s", out)
	require.Regexp(t, `10\.98\.7\.2\.\d+ > 10\.98\.7\.1\.9001: UDP`, out, "the guest's own, masqueraded")
	for _, port := range []string{"9002", "9003", "9004", "9005"} {
		assert.NotContains(t, out, "."+port+": UDP", "spoofed, port %s", port)
	}

	t.Run("ARP answers the guest only", func(t *testing.T) {
		assert.True(t, g.arp(t, guardMAC, guardMAC, guest, gw), "the guest's own")
		assert.False(t, g.arp(t, otherMAC, otherMAC, guest, gw), "from another MAC")
		assert.False(t, g.arp(t, guardMAC, otherMAC, guest, gw), "naming another MAC")
		assert.False(t, g.arp(t, guardMAC, guardMAC, netip.MustParseAddr("10.0.2.99"), gw), "for another address")
	})

	t.Run("the DHCP server answers the guest", func(t *testing.T) {
		d, err := dhcpv4.NewDiscovery(guardMAC)
		require.NoError(t, err)
		g.send(t, guardMAC, udp4With(netip.IPv4Unspecified(), netip.MustParseAddr("255.255.255.255"), 68, 67, d.ToBytes()))
		offer := g.read(t, 10*time.Second, func(f frame) bool {
			return f.isUDP4(68) && strings.Contains(string(f.payload()), string(guardMAC))
		})
		require.NotNil(t, offer, "no DHCP offer")
	})
}

// TestSpoofingGuest: the test guest, booted on the pod's tap, poses as
// another pod, another MAC and sends IPv6: none of it leaves the pod,
// while its own pings do.
func TestSpoofingGuest(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a guest")
	}
	g := testguest.Build(t).WithAppend(testguest.DHCP)
	p := newPod(t)
	p.serve(t, Options{Net: netip.MustParsePrefix("10.0.2.0/24"), MAC: benchMAC})
	netns := []string{"ip", "netns", "exec", p.ns}
	q := startGuest(t, g, netns, "-netdev", "tap,id=n,ifname="+Tap+",script=no,downscript=no", "-device", "virtio-net-pci,netdev=n,mac="+benchMAC)
	left := testguest.Capture(t, netns, "eth0", "-Q", "out", "icmp")
	sent := testguest.Capture(t, netns, Tap, "icmp or icmp6")
	s := testguest.Spoofing{IP: "10.98.7.3", MAC: otherMAC.String(), Dst: "10.98.7.1"}
	q.typeLine(t, s.Line())
	q.wait(t, testguest.SpoofedLine)
	s.Check(t, "10.98.7.2", sent(), left())
}

// serve runs Setup in the pod's namespace and the guest's DHCP server
// there until the test ends, as the runner does.
func (p *pod) serve(t testing.TB, o Options) {
	t.Helper()
	opts, err := json.Marshal(o)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", p.ns, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+string(opts), serveEnv+"="+o.MAC)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Wait()
	})
	// It prints the Network once it serves.
	var n Network
	require.NoError(t, json.NewDecoder(stdout).Decode(&n))
}

// guestEnd is the guest's end of the tap: Ethernet frames in and out, as
// qemu has them.
type guestEnd struct {
	f      *os.File
	tapMAC net.HardwareAddr // the pod's side
}

// fakeGuest opens the pod's tap as qemu would.
func (p *pod) fakeGuest(t testing.TB) *guestEnd {
	t.Helper()
	ns, err := os.Open("/run/netns/" + p.ns)
	require.NoError(t, err)
	defer ns.Close()
	type result struct {
		fd  int
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread ends with the goroutine, so no other
		// goroutine runs in the pod's namespace.
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: err}
			return
		}
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- result{err: err}
			return
		}
		ifr, err := unix.NewIfreq(Tap)
		if err == nil {
			ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
			err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
		}
		if err != nil {
			unix.Close(fd)
		}
		done <- result{fd, err}
	}()
	r := <-done
	require.NoError(t, r.err, "opening the tap")
	g := &guestEnd{f: os.NewFile(uintptr(r.fd), Tap)}
	t.Cleanup(func() { g.f.Close() })
	g.tapMAC, err = net.ParseMAC(strings.TrimSpace(p.run(t, "cat", "/sys/class/net/"+Tap+"/address")))
	require.NoError(t, err)
	return g
}

// send writes an Ethernet frame from src to the pod's side of the tap.
func (g *guestEnd) send(t testing.TB, src net.HardwareAddr, p packet) {
	t.Helper()
	g.sendTo(t, g.tapMAC, src, p)
}

func (g *guestEnd) sendTo(t testing.TB, dst, src net.HardwareAddr, p packet) {
	t.Helper()
	f := append(append(append([]byte{}, dst...), src...), byte(p.typ>>8), byte(p.typ))
	_, err := g.f.Write(append(f, p.data...))
	require.NoError(t, err)
}

// packet is what a frame carries: its EtherType and data.
type packet struct {
	typ  uint16
	data []byte
}

// read returns the first frame the pod sends the guest that matches,
// within timeout; nil if none.
func (g *guestEnd) read(t testing.TB, timeout time.Duration, match func(frame) bool) frame {
	t.Helper()
	require.NoError(t, g.f.SetReadDeadline(time.Now().Add(timeout)))
	buf := make([]byte, 65536)
	for {
		n, err := g.f.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		require.NoError(t, err)
		if f := frame(append([]byte{}, buf[:n]...)); match(f) {
			return f
		}
	}
}

// arp asks, in a frame from src, who has target, as sender sha/spa, and
// says whether the pod answered.
func (g *guestEnd) arp(t testing.TB, src, sha net.HardwareAddr, spa, target netip.Addr) bool {
	t.Helper()
	// Ethernet, IPv4, 6 and 4 bytes, request.
	req := []byte{0, 1, 8, 0, 6, 4, 0, 1}
	req = append(append(req, sha...), spa.AsSlice()...)
	req = append(append(req, make([]byte, 6)...), target.AsSlice()...)
	g.sendTo(t, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, src, packet{unix.ETH_P_ARP, req})
	return g.read(t, time.Second, func(f frame) bool {
		return f.etherType() == unix.ETH_P_ARP && len(f) >= 42 && f[21] == 2 && net.HardwareAddr(f[32:38]).String() == sha.String()
	}) != nil
}

// frame is an Ethernet frame.
type frame []byte

func (f frame) etherType() uint16 { return binary.BigEndian.Uint16(f[12:14]) }

// isUDP4 is IPv4 UDP to port.
func (f frame) isUDP4(port uint16) bool {
	return len(f) >= 42 && f.etherType() == unix.ETH_P_IP && f[23] == unix.IPPROTO_UDP &&
		binary.BigEndian.Uint16(f[36:38]) == port
}

// payload is a UDP frame's data (IPv4 without options).
func (f frame) payload() []byte { return f[42:] }

// udp4 is an IPv4 UDP packet from src to dst's port, 5 bytes of data.
func udp4(src, dst netip.Addr, port uint16) packet {
	return udp4With(src, dst, 40000, port, []byte("spoof"))
}

func udp4With(src, dst netip.Addr, sport, dport uint16, data []byte) packet {
	u := udpHeader(sport, dport, data) // no checksum: optional in IPv4
	ip := []byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, unix.IPPROTO_UDP, 0, 0}
	binary.BigEndian.PutUint16(ip[2:], uint16(20+len(u)))
	ip = append(append(ip, src.AsSlice()...), dst.AsSlice()...)
	binary.BigEndian.PutUint16(ip[10:], checksum(ip))
	return packet{unix.ETH_P_IP, append(ip, u...)}
}

// udp6 is an IPv6 UDP packet from src to dst's port.
func udp6(src, dst netip.Addr, port uint16) packet {
	u := udpHeader(40000, port, []byte("spoof"))
	pseudo := append(append(append([]byte{}, src.AsSlice()...), dst.AsSlice()...), 0, 0, 0, byte(len(u)), 0, 0, 0, unix.IPPROTO_UDP)
	binary.BigEndian.PutUint16(u[6:], checksum(append(pseudo, u...)))
	ip := []byte{0x60, 0, 0, 0, 0, 0, unix.IPPROTO_UDP, 64}
	binary.BigEndian.PutUint16(ip[4:], uint16(len(u)))
	ip = append(append(ip, src.AsSlice()...), dst.AsSlice()...)
	return packet{unix.ETH_P_IPV6, append(ip, u...)}
}

func udpHeader(sport, dport uint16, data []byte) []byte {
	u := binary.BigEndian.AppendUint16(nil, sport)
	u = binary.BigEndian.AppendUint16(u, dport)
	u = binary.BigEndian.AppendUint16(u, uint16(8+len(data)))
	return append(append(u, 0, 0), data...)
}

// checksum is the Internet checksum (RFC 1071).
func checksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
