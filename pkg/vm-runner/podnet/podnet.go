// Package podnet puts a VM's NIC on its pod's network, as KubeVirt's
// masquerade binding does: a tap device in the pod's network namespace,
// a private network between the pod and the guest, NAT from the pod's
// interface to the guest for incoming connections and back out for the
// guest's own, and (pkg/vm-runner/dhcp) the guest's address by DHCP. The pod keeps
// its IP, so the runner, its SPICE port and Kubernetes' probes still
// reach the pod itself.
//
// It changes the network namespace it runs in: only a pod's own, never a
// node's (the runner refuses it outside a pod).
package podnet

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/dhcp"
)

// Tap is the name of the guest's tap device in the pod.
const Tap = "vmtap0"

// Port is a port of the pod's IP, and of the guest.
type Port struct {
	Protocol string // TCP or UDP
	Port     uint16
}

// Options say what Setup builds.
type Options struct {
	// Net is the guest's side: the pod gets its 3rd address, the guest its
	// 16th, as on qemu's user network.
	Net netip.Prefix
	// Ports, when given, are the only ones passed to the guest; else all
	// are but Reserved.
	Ports    []Port
	Reserved []Port
}

// Network is what Setup built.
type Network struct {
	Uplink  string       // the pod's interface
	PodIP   netip.Addr   // the pod's IPv4 address on it
	MTU     int          // the uplink's, and so the guest's
	Gateway netip.Addr   // the pod's address on the tap
	Guest   netip.Prefix // the guest's address
	DNS     []netip.Addr // the pod's name servers
	Search  []string     // and search domains
}

// Paths of the files Setup reads; variables for tests.
var (
	routeFile   = "/proc/net/route"
	resolvFile  = "/etc/resolv.conf"
	forwardFile = "/proc/sys/net/ipv4/ip_forward"
)

// Setup builds the guest's side of the pod's network: the tap (or takes
// the one a previous runner of the pod left), its address, forwarding and
// the NAT rules. Running it again replaces the rules.
func Setup(o Options) (*Network, error) {
	n, err := inspect(o.Net)
	if err != nil {
		return nil, err
	}
	if err := createTap(Tap, n.MTU, n.Gateway, o.Net.Bits()); err != nil {
		return nil, err
	}
	if err := os.WriteFile(forwardFile, []byte("1\n"), 0); err != nil {
		return nil, fmt.Errorf("enabling IPv4 forwarding in the pod: %w (the runner needs a writable /proc/sys, as a privileged container has)", err)
	}
	if err := applyNAT(natRules{uplink: n.Uplink, guest: n.Guest.Addr(), guestNet: o.Net.Masked(), ports: o.Ports, reserved: o.Reserved}); err != nil {
		return nil, fmt.Errorf("NAT rules in the pod: %w (the node's kernel needs nf_tables with NAT, and the runner NET_ADMIN)", err)
	}
	return n, nil
}

// Lease is the guest's DHCP lease for its NIC's mac.
func (n *Network) Lease(mac net.HardwareAddr, hostname string) dhcp.Lease {
	return dhcp.Lease{
		MAC: mac, Addr: n.Guest, Router: n.Gateway, DNS: n.DNS, Search: n.Search,
		Hostname: hostname, MTU: n.MTU, Duration: leaseTime,
	}
}

// leaseTime: the lease never changes, so a long one saves the guest's
// renewals nothing but log lines.
const leaseTime = 24 * time.Hour

// inspect finds the pod's interface and addresses and plans the guest's.
func inspect(guestNet netip.Prefix) (*Network, error) {
	if !guestNet.Addr().Is4() || guestNet.Bits() < 4 || guestNet.Bits() > 27 {
		return nil, fmt.Errorf("guest network %s: must be IPv4 with a prefix of 4 to 27 bits", guestNet)
	}
	base := guestNet.Masked().Addr().As4()
	at := func(i byte) netip.Addr {
		a := base
		a[3] += i
		return netip.AddrFrom4(a)
	}
	n := &Network{Gateway: at(2), Guest: netip.PrefixFrom(at(15), guestNet.Bits())}
	var err error
	if n.Uplink, err = defaultRouteInterface(); err != nil {
		return nil, err
	}
	iface, err := net.InterfaceByName(n.Uplink)
	if err != nil {
		return nil, fmt.Errorf("the pod's interface %s: %w", n.Uplink, err)
	}
	n.MTU = iface.MTU
	addrs, err := iface.Addrs()
	if err != nil {
		return nil, fmt.Errorf("the addresses of the pod's interface %s: %w", n.Uplink, err)
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Is4() {
			n.PodIP = p.Addr()
			if p.Masked().Contains(n.Guest.Addr()) || guestNet.Masked().Contains(n.PodIP) {
				return nil, fmt.Errorf("the guest network %s overlaps the pod's %s: choose another net for the pod network", guestNet, p)
			}
			break
		}
	}
	if !n.PodIP.IsValid() {
		return nil, fmt.Errorf("the pod's interface %s has no IPv4 address", n.Uplink)
	}
	n.DNS, n.Search = readResolvConf(resolvFile)
	return n, nil
}

// defaultRouteInterface is the interface of the IPv4 default route.
func defaultRouteInterface() (string, error) {
	b, err := os.ReadFile(routeFile)
	if err != nil {
		return "", err
	}
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		// Iface Destination Gateway Flags ... Mask ..., hexadecimal.
		f := strings.Fields(s.Text())
		if len(f) >= 8 && f[1] == "00000000" && f[7] == "00000000" {
			return f[0], nil
		}
	}
	return "", errors.New("the pod has no IPv4 default route, so no interface to share with the guest")
}

// readResolvConf returns the IPv4 name servers and the search domains of
// a resolv.conf; nothing when it cannot be read (the guest then has no
// name servers, which its own configuration may supply).
func readResolvConf(path string) ([]netip.Addr, []string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	var dns []netip.Addr
	var search []string
	s := bufio.NewScanner(bytes.NewReader(b))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "nameserver":
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				dns = append(dns, a)
			}
		case "search":
			search = f[1:]
		}
	}
	return dns, search
}
