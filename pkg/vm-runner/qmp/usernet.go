package qmp

import (
	"context"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
)

// User networking (slirp) has no QMP commands in qemu 7.2: its netdevs
// are listed and its host forwards added and removed only through the
// human monitor (HMP), which human-monitor-command runs over QMP. HMP
// reports failure as text, not as a QMP error: these commands turn any
// output but the one of success into an error.

// HumanMonitorCommand runs one HMP command line and returns its output.
func (m *Monitor) HumanMonitorCommand(ctx context.Context, line string) (string, error) {
	var out string
	err := m.Execute(ctx, "human-monitor-command", map[string]any{"command-line": line}, &out)
	return out, err
}

// userNetdev matches a user-mode netdev that a NIC uses in "info
// network": " \ net0: index=0,type=user,net=10.0.2.0,restrict=on" under
// the NIC's line, which ends with its MAC address (a netdev without a NIC
// has a line of its own).
var userNetdev = regexp.MustCompile(`(?m),macaddr=([0-9a-fA-F:]+)\r?\n \\ ([^\s:]+): index=\d+,type=user(?:,|\r?$)`)

// UserNetdev is a user-mode netdev and the MAC address of its NIC.
type UserNetdev struct {
	ID, MAC string
}

// UserNetdevs lists the user-mode netdevs that a NIC uses, in the order
// of qemu's NICs. They come from qemu rather than from the runner's
// config because a command template may define its own.
func (m *Monitor) UserNetdevs(ctx context.Context) ([]UserNetdev, error) {
	out, err := m.HumanMonitorCommand(ctx, "info network")
	if err != nil {
		return nil, err
	}
	var netdevs []UserNetdev
	for _, sub := range userNetdev.FindAllStringSubmatch(out, -1) {
		netdevs = append(netdevs, UserNetdev{ID: sub[2], MAC: strings.ToLower(sub[1])})
	}
	return netdevs, nil
}

// HostfwdAdd makes user-mode netdev forward TCP connections to host
// (an IP address and port of the host running qemu) to guest: an address
// of the guest on that network, or without one the first address that
// the network's DHCP server hands out, and a port.
func (m *Monitor) HostfwdAdd(ctx context.Context, netdev string, host, guest netip.AddrPort) error {
	if !host.Addr().Is4() {
		return fmt.Errorf("qmp hostfwd_add: host address %s: only IPv4 is supported", host.Addr())
	}
	guestAddr := ""
	if guest.Addr().IsValid() {
		if !guest.Addr().Is4() {
			return fmt.Errorf("qmp hostfwd_add: guest address %s: only IPv4 is supported", guest.Addr())
		}
		guestAddr = guest.Addr().String()
	}
	return m.hmp(ctx, fmt.Sprintf("hostfwd_add %s tcp:%s-%s:%d", netdev, hostfwdHost(host), guestAddr, guest.Port()), "")
}

// HostfwdRemove removes the forward of host that HostfwdAdd made.
func (m *Monitor) HostfwdRemove(ctx context.Context, netdev string, host netip.AddrPort) error {
	rule := "tcp:" + hostfwdHost(host)
	return m.hmp(ctx, "hostfwd_remove "+netdev+" "+rule, "host forwarding rule for "+rule+" removed")
}

// hostfwdHost is ADDR:PORT as hostfwd rules write it (IPv4 only: qemu
// 7.2's rule parser splits at the first colon).
func hostfwdHost(host netip.AddrPort) string {
	return host.Addr().String() + ":" + strconv.Itoa(int(host.Port()))
}

// hmp runs an HMP command line that prints success when it succeeds.
func (m *Monitor) hmp(ctx context.Context, line, success string) error {
	out, err := m.HumanMonitorCommand(ctx, line)
	if err != nil {
		return err
	}
	if out = strings.TrimSpace(out); out != success {
		return &Error{Class: "GenericError", Desc: line + ": " + out}
	}
	return nil
}
