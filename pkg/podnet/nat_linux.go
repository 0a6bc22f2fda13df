package podnet

import (
	"encoding/binary"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// table names the nftables tables of the pod network, in the pod's
// network namespace: NAT (ip family) and the guest's guard (netdev);
// replacing them whole makes Setup repeatable.
const table = "vmop-pod-network"

// natRules are the NAT between the pod's interface and the guest.
type natRules struct {
	uplink   string
	guest    netip.Addr
	guestNet netip.Prefix
	ports    []Port
	reserved []Port
}

// applyRules replaces the pod network's tables, NAT and the guest's
// guard, in one netlink batch: the guest is never half reachable nor
// half guarded.
func applyRules(r natRules, g guestRules) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	r.add(c)
	g.add(c)
	return c.Flush()
}

// replaceTable empties the pod network's table of family f in c's batch.
func replaceTable(c *nftables.Conn, f nftables.TableFamily) *nftables.Table {
	t := &nftables.Table{Name: table, Family: f}
	// Adding first makes the delete succeed on the first run too.
	c.AddTable(t)
	c.DelTable(t)
	return c.AddTable(t)
}

// add replaces the NAT table in c's batch.
func (r natRules) add(c *nftables.Conn) {
	t := replaceTable(c, nftables.TableFamilyIPv4)
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	for _, exprs := range r.prerouting() {
		c.AddRule(&nftables.Rule{Table: t, Chain: pre, Exprs: exprs})
	}
	c.AddRule(&nftables.Rule{Table: t, Chain: post, Exprs: r.postrouting()})
}

// prerouting: connections to the pod's interface go to the guest, except
// those to the pod's own ports (accepted first, untranslated); with ports
// listed, only those.
func (r natRules) prerouting() [][]expr.Any {
	var rules [][]expr.Any
	for _, p := range r.reserved {
		rules = append(rules, r.match(p.Protocol, p.Port, &expr.Verdict{Kind: expr.VerdictAccept}))
	}
	dnat := []expr.Any{
		&expr.Immediate{Register: 1, Data: r.guest.AsSlice()},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
	if len(r.ports) == 0 {
		for _, proto := range []string{"TCP", "UDP"} {
			rules = append(rules, r.match(proto, 0, dnat...))
		}
		return rules
	}
	for _, p := range r.ports {
		rules = append(rules, r.match(p.Protocol, p.Port, dnat...))
	}
	return rules
}

// postrouting: the guest's own connections leave with the pod's IP.
func (r natRules) postrouting() []expr.Any {
	p := r.guestNet.Masked()
	mask := net4Mask(p.Bits())
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(r.uplink)},
		// ip saddr & mask == net
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()},
		&expr.Masq{},
	}
}

// match is "iifname UPLINK meta l4proto PROTO [th dport PORT]" then then.
func (r natRules) match(proto string, port uint16, then ...expr.Any) []expr.Any {
	l4 := byte(unix.IPPROTO_TCP)
	if proto == "UDP" {
		l4 = unix.IPPROTO_UDP
	}
	e := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(r.uplink)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{l4}},
	}
	if port != 0 {
		e = append(e,
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, port)})
	}
	return append(e, then...)
}

// ifname is an interface name as nftables compares it: NUL-padded to
// IFNAMSIZ.
func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

func net4Mask(bits int) []byte {
	m := ^uint32(0) << (32 - bits)
	return binary.BigEndian.AppendUint32(nil, m)
}
