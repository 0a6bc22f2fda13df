// Package podnet puts a VM's NIC on its pod's network, as KubeVirt's
// masquerade binding does: a tap device in the pod's network namespace,
// a private network between the pod and the guest, NAT from the pod's
// interface to the guest for incoming connections and back out for the
// guest's own, and (pkg/vm-runner/dhcp) the guest's address by DHCP. The pod keeps
// its IP, so the runner, its SPICE port and Kubernetes' probes still
// reach the pod itself.
//
// It changes the network namespace of the calling thread: only a pod's
// own, never a node's. The node agent (pkg/vm-node) runs it in a VM pod's
// namespace for an unprivileged runner; a privileged runner (a VM with a
// tap NIC on a host bridge) runs it itself.
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
)

// Tap is the name of the guest's tap device in the pod.
const Tap = "vmtap0"

// Port is a port of the pod's IP, and of the guest.
type Port struct {
	Protocol string `json:"protocol"` // TCP or UDP
	Port     uint16 `json:"port"`
}

// Options say what Setup builds.
type Options struct {
	// Net is the guest's side: the pod gets its 3rd address, the guest its
	// 16th, as on qemu's user network.
	Net netip.Prefix `json:"net"`
	// Ports, when given, are the only ones passed to the guest; else all
	// are but Reserved.
	Ports    []Port `json:"ports,omitempty"`
	Reserved []Port `json:"reserved,omitempty"`
	// MAC is the guest NIC's: the only source MAC its frames may have.
	// Empty (an older runner's request) leaves the MAC unchecked.
	MAC string `json:"mac,omitempty"`
	// TapOwner, when not 0, is the uid (and gid) that may open the tap
	// without privileges: the runner's, when it has none. Then the
	// namespace's unprivileged ports also start at the DHCP server's.
	TapOwner int `json:"tapOwner,omitempty"`
}

// Network is what Setup built.
type Network struct {
	Uplink  string       `json:"uplink"`  // the pod's interface
	PodIP   netip.Addr   `json:"podIP"`   // the pod's IPv4 address on it
	MTU     int          `json:"mtu"`     // the uplink's, and so the guest's
	Gateway netip.Addr   `json:"gateway"` // the pod's address on the tap
	Guest   netip.Prefix `json:"guest"`   // the guest's address
}

// Paths of the files Setup reads and writes: those of the calling
// thread's network namespace; variables for tests.
var (
	routeFile   = "/proc/thread-self/net/route"
	forwardFile = "/proc/sys/net/ipv4/ip_forward"
	portsFile   = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
)

// dhcpPort is the DHCP server's port, which an unprivileged runner binds.
const dhcpPort = "67"

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

// ResolvConf returns the IPv4 name servers and the search domains of a
// resolv.conf; nothing when it cannot be read (the guest then has no
// name servers, which its own configuration may supply).
func ResolvConf(path string) ([]netip.Addr, []string) {
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
