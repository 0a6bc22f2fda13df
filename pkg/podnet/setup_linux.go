package podnet

import (
	"fmt"
	"os"
)

// Setup builds the guest's side of the pod's network: the tap (or takes
// the one a previous runner of the pod left), its address, forwarding and
// the NAT rules. Running it again replaces the rules.
func Setup(o Options) (*Network, error) {
	n, err := inspect(o.Net)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(forwardFile, []byte("1\n"), 0); err != nil {
		return nil, fmt.Errorf("enabling IPv4 forwarding in the pod: %w (needs a writable /proc/sys: the node agent's, or a privileged container's)", err)
	}
	if o.TapOwner != 0 {
		if err := os.WriteFile(portsFile, []byte(dhcpPort+"\n"), 0); err != nil {
			return nil, fmt.Errorf("letting the runner bind the DHCP port in the pod: %w", err)
		}
	}
	if err := applyNAT(natRules{uplink: n.Uplink, guest: n.Guest.Addr(), guestNet: o.Net.Masked(), ports: o.Ports, reserved: o.Reserved}); err != nil {
		return nil, fmt.Errorf("NAT rules in the pod: %w (the node's kernel needs nf_tables with NAT)", err)
	}
	// Last: the tap's existence means the rest is in place.
	if err := createTap(Tap, n.MTU, n.Gateway, o.Net.Bits(), o.TapOwner); err != nil {
		return nil, err
	}
	return n, nil
}
