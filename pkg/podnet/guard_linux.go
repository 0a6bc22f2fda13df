package podnet

import (
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// guestRules are what the guest may send into the pod: frames from its
// MAC carrying IPv4 from its address, its DHCP requests before it has
// one, and ARP about itself. Anything else (another pod's address, IPv6,
// a VLAN tag) is dropped as it enters the tap, before the pod routes it:
// a guest can pose as no one else on the pod network, also where the CNI
// does not check sources.
type guestRules struct {
	tap   string
	mac   net.HardwareAddr // nil: any
	guest netip.Addr
}

// add replaces the guard's table (the pod network's name, in the netdev
// family) in c's batch. Its chain binds to the tap, which must exist.
func (g guestRules) add(c *nftables.Conn) {
	t := replaceTable(c, nftables.TableFamilyNetdev)
	drop := nftables.ChainPolicyDrop
	ch := c.AddChain(&nftables.Chain{Name: "guest", Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookIngress, Priority: nftables.ChainPriorityFilter, Device: g.tap, Policy: &drop})
	for _, exprs := range g.rules() {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
	}
}

// rules, in nft's words:
//
//	meta iiftype ether ether saddr != MAC drop
//	meta protocol ip ip saddr GUEST accept
//	meta protocol ip ip saddr 0.0.0.0 ip daddr 255.255.255.255 udp sport 68 udp dport 67 accept
//	meta protocol arp arp htype 1 arp ptype ip arp hlen 6 arp plen 4 arp saddr ether MAC arp saddr ip {GUEST, 0.0.0.0} accept
//
// and the chain's policy drops the rest.
func (g guestRules) rules() [][]expr.Any {
	accept := []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}
	var rules [][]expr.Any
	if g.mac != nil {
		rules = append(rules, []expr.Any{
			// The tap is Ethernet; nft says so before it reads a MAC.
			&expr.Meta{Key: expr.MetaKeyIIFTYPE, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.NativeEndian.AppendUint16(nil, unix.ARPHRD_ETHER)},
			load(expr.PayloadBaseLLHeader, 6, 6),
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: g.mac},
			&expr.Verdict{Kind: expr.VerdictDrop},
		})
	}
	ipv4 := protocol(unix.ETH_P_IP)
	rules = append(rules, concat(ipv4, equal(expr.PayloadBaseNetworkHeader, 12, g.guest.AsSlice()), accept))
	// DHCP's DISCOVER and REQUEST before the guest has its address.
	rules = append(rules, concat(ipv4,
		equal(expr.PayloadBaseNetworkHeader, 12, []byte{0, 0, 0, 0, 255, 255, 255, 255}),
		[]expr.Any{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
		},
		equal(expr.PayloadBaseTransportHeader, 0, []byte{0, 68, 0, 67}),
		accept))
	// ARP (Ethernet, IPv4) from the guest about itself, or its probe
	// (RFC 5227) for an address: the pod learns no other neighbour there.
	arp := concat(protocol(unix.ETH_P_ARP), equal(expr.PayloadBaseNetworkHeader, 0, []byte{0, 1, 8, 0, 6, 4}))
	if g.mac != nil {
		arp = concat(arp, equal(expr.PayloadBaseNetworkHeader, 8, g.mac))
	}
	for _, sender := range []netip.Addr{g.guest, netip.IPv4Unspecified()} {
		rules = append(rules, concat(arp, equal(expr.PayloadBaseNetworkHeader, 14, sender.AsSlice()), accept))
	}
	return rules
}

// protocol is "meta protocol P": the frame's EtherType.
func protocol(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyPROTOCOL, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, p)},
	}
}

// equal is "the bytes at offset of base are data".
func equal(base expr.PayloadBase, offset uint32, data []byte) []expr.Any {
	return []expr.Any{load(base, offset, uint32(len(data))), &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

func load(base expr.PayloadBase, offset, n uint32) *expr.Payload {
	return &expr.Payload{DestRegister: 1, Base: base, Offset: offset, Len: n}
}

// concat is one rule's expressions from its parts, each copied.
func concat(parts ...[]expr.Any) []expr.Any {
	var e []expr.Any
	for _, p := range parts {
		e = append(e, p...)
	}
	return e
}
