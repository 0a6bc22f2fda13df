package dhcp

import (
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"strings"
	"time"
)

// Option codes (RFC 2132, RFC 3397, RFC 6842) this server reads or writes.
const (
	optPad         = 0
	optSubnetMask  = 1
	optRouter      = 3
	optDNS         = 6
	optHostname    = 12
	optDomain      = 15
	optMTU         = 26
	optRequestedIP = 50
	optLeaseTime   = 51
	optOverload    = 52
	optMessageType = 53
	optServerID    = 54
	optMessage     = 56
	optRenewalT1   = 58
	optRebindingT2 = 59
	optClientID    = 61
	optSearch      = 119
	optEnd         = 255
)

// leaseOptions are the options of an OFFER and an ACK to a REQUEST.
// configOptions are those of any ACK, also the one to an INFORM, which
// must not carry lease times (RFC 2131 section 4.3.5).
func (l Lease) options() (leaseOptions, configOptions Options, err error) {
	mac := l.MAC.String()
	switch {
	case len(l.MAC) == 0 || len(l.MAC) > chaddrLen:
		return nil, nil, fmt.Errorf("dhcp: lease: MAC %q is not 1 to %d bytes", mac, chaddrLen)
	case !l.Addr.IsValid() || !l.Addr.Addr().Is4() || l.Addr.Bits() == 0:
		return nil, nil, fmt.Errorf("dhcp: lease for %s: address %v is not an IPv4 prefix", mac, l.Addr)
	case !l.Router.Is4():
		return nil, nil, fmt.Errorf("dhcp: lease for %s: router %v is not an IPv4 address", mac, l.Router)
	case l.Router == l.Addr.Addr():
		return nil, nil, fmt.Errorf("dhcp: lease for %s: router %v is the guest's address", mac, l.Router)
	case l.MTU != 0 && (l.MTU < 68 || l.MTU > math.MaxUint16):
		return nil, nil, fmt.Errorf("dhcp: lease for %s: MTU %d is not 68 to %d", mac, l.MTU, math.MaxUint16)
	case l.Duration < time.Second || l.Duration/time.Second >= math.MaxUint32:
		// 0xffffffff seconds would mean forever.
		return nil, nil, fmt.Errorf("dhcp: lease for %s: duration %v is not 1s to %ds", mac, l.Duration, uint32(math.MaxUint32-1))
	}
	for _, a := range l.DNS {
		if !a.Is4() {
			return nil, nil, fmt.Errorf("dhcp: lease for %s: DNS server %v is not an IPv4 address", mac, a)
		}
	}
	configOptions = Options{
		optSubnetMask: net.CIDRMask(l.Addr.Bits(), 32),
		optRouter:     encodeAddrs([]netip.Addr{l.Router}),
	}
	if len(l.DNS) > 0 {
		configOptions[optDNS] = encodeAddrs(l.DNS)
	}
	for _, f := range []struct {
		code        uint8
		field, name string
	}{{optDomain, "domain", l.Domain}, {optHostname, "hostname", l.Hostname}} {
		if f.name == "" {
			continue
		}
		if err := checkName(f.name); err != nil {
			return nil, nil, fmt.Errorf("dhcp: lease for %s: %s: %w", mac, f.field, err)
		}
		configOptions[f.code] = []byte(f.name)
	}
	if len(l.Search) > 0 {
		search, err := encodeSearch(l.Search)
		if err != nil {
			return nil, nil, fmt.Errorf("dhcp: lease for %s: search: %w", mac, err)
		}
		configOptions[optSearch] = search
	}
	if l.MTU > 0 {
		configOptions[optMTU] = binary.BigEndian.AppendUint16(nil, uint16(l.MTU))
	}

	// T1 and T2 at 0.5 and 0.875 of the lease (RFC 2131 section 4.4.5).
	secs := uint32(l.Duration / time.Second)
	leaseOptions = Options{
		optLeaseTime:   binary.BigEndian.AppendUint32(nil, secs),
		optRenewalT1:   binary.BigEndian.AppendUint32(nil, secs/2),
		optRebindingT2: binary.BigEndian.AppendUint32(nil, uint32(uint64(secs)*7/8)),
	}
	maps.Copy(leaseOptions, configOptions)
	return leaseOptions, configOptions, nil
}

func encodeAddrs(addrs []netip.Addr) []byte {
	b := make([]byte, 0, 4*len(addrs))
	for _, a := range addrs {
		b = append(b, a.AsSlice()...)
	}
	return b
}

// checkName accepts a host or domain name: labels of 1 to 63 letters,
// digits, '-' or '_', at most 253 bytes, optionally ending in a dot. The
// guest's client hands these to shell scripts, which need no surprises.
func checkName(name string) error {
	trimmed := strings.TrimSuffix(name, ".")
	if trimmed == "" || len(trimmed) > 253 {
		return fmt.Errorf("%q is not a name of 1 to 253 bytes", name)
	}
	for label := range strings.SplitSeq(trimmed, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("%q has a label that is not 1 to 63 bytes", name)
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("%q has the character %q", name, c)
			}
		}
	}
	return nil
}

// encodeSearch is option 119's value (RFC 3397): the names as DNS labels,
// a repeated suffix as a pointer to its first occurrence (RFC 1035 section
// 4.1.4), which keeps most lists within one option instance.
func encodeSearch(names []string) ([]byte, error) {
	var b []byte
	offsets := map[string]int{} // suffix -> where it was written
	for _, name := range names {
		if err := checkName(name); err != nil {
			return nil, err
		}
		labels := strings.Split(strings.TrimSuffix(name, "."), ".")
		pointer := false
		for i := range labels {
			suffix := strings.Join(labels[i:], ".")
			if off, ok := offsets[suffix]; ok {
				b = binary.BigEndian.AppendUint16(b, 0xc000|uint16(off))
				pointer = true
				break
			}
			if len(b) < 0x4000 { // what a pointer's 14 bits reach
				offsets[suffix] = len(b)
			}
			b = append(b, uint8(len(labels[i])))
			b = append(b, labels[i]...)
		}
		if !pointer {
			b = append(b, 0)
		}
	}
	return b, nil
}
