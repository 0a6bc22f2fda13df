package podnet

import (
	"fmt"
	"net"
	"os"
)

// Setup builds the guest's side of the pod's network: the tap (or takes
// the one a previous runner of the pod left), its address, forwarding,
// the NAT rules and the guard on what the guest sends. Running it again
// replaces the rules.
func Setup(o Options) (*Network, error) {
	n, err := inspect(o.Net)
	if err != nil {
		return nil, err
	}
	var mac net.HardwareAddr
	if o.MAC != "" {
		if mac, err = net.ParseMAC(o.MAC); err != nil || len(mac) != 6 {
			return nil, fmt.Errorf("the guest's MAC %q: not an Ethernet address", o.MAC)
		}
	}
	if err := os.WriteFile(forwardFile, []byte("1\n"), 0); err != nil {
		return nil, fmt.Errorf("enabling IPv4 forwarding in the pod: %w (needs a writable /proc/sys: the node agent's, or a privileged container's)", err)
	}
	if o.TapOwner != 0 {
		if err := os.WriteFile(portsFile, []byte(dhcpPort+"\n"), 0); err != nil {
			return nil, fmt.Errorf("letting the runner bind the DHCP port in the pod: %w", err)
		}
	}
	// The guard binds to the tap, which comes up only once it is in place.
	if err := createTap(Tap, o.TapOwner); err != nil {
		return nil, err
	}
	nat := natRules{uplink: n.Uplink, guest: n.Guest.Addr(), guestNet: o.Net.Masked(), ports: o.Ports, reserved: o.Reserved}
	if err := applyRules(nat, guestRules{tap: Tap, mac: mac, guest: n.Guest.Addr()}); err != nil {
		return nil, fmt.Errorf("nftables rules in the pod: %w (the node's kernel needs nf_tables with NAT and the netdev family)", err)
	}
	if err := configure(Tap, n.MTU, n.Gateway, o.Net.Bits()); err != nil {
		return nil, err
	}
	return n, nil
}
