package dhcp

import (
	"fmt"
	"maps"
	"math"
	"net"
	"strings"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/rfc1035label"
)

// leaseOptions are the options of an OFFER and an ACK to a REQUEST.
// configOptions are those of any ACK, also the one to an INFORM, which
// must not carry lease times (RFC 2131 section 4.3.5).
func (l Lease) options() (leaseOptions, configOptions dhcpv4.Options, err error) {
	mac := l.MAC.String()
	switch {
	case len(l.MAC) == 0 || len(l.MAC) > dhcpv4.MaxHWAddrLen:
		return nil, nil, fmt.Errorf("dhcp: lease: MAC %q is not 1 to %d bytes", mac, dhcpv4.MaxHWAddrLen)
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
	dns := make([]net.IP, len(l.DNS))
	for i, a := range l.DNS {
		if !a.Is4() {
			return nil, nil, fmt.Errorf("dhcp: lease for %s: DNS server %v is not an IPv4 address", mac, a)
		}
		dns[i] = a.AsSlice()
	}
	configOptions = dhcpv4.OptionsFromList(
		dhcpv4.OptSubnetMask(net.CIDRMask(l.Addr.Bits(), 32)),
		dhcpv4.OptRouter(l.Router.AsSlice()),
	)
	if len(dns) > 0 {
		configOptions.Update(dhcpv4.OptDNS(dns...))
	}
	for _, f := range []struct {
		opt         func(string) dhcpv4.Option
		field, name string
	}{{dhcpv4.OptDomainName, "domain", l.Domain}, {dhcpv4.OptHostName, "hostname", l.Hostname}} {
		if f.name == "" {
			continue
		}
		if err := checkName(f.name); err != nil {
			return nil, nil, fmt.Errorf("dhcp: lease for %s: %s: %w", mac, f.field, err)
		}
		configOptions.Update(f.opt(f.name))
	}
	if len(l.Search) > 0 {
		search := &rfc1035label.Labels{}
		for _, name := range l.Search {
			if err := checkName(name); err != nil {
				return nil, nil, fmt.Errorf("dhcp: lease for %s: search: %w", mac, err)
			}
			// rfc1035label would encode the root's empty label twice.
			search.Labels = append(search.Labels, strings.TrimSuffix(name, "."))
		}
		configOptions.Update(dhcpv4.OptDomainSearch(search))
	}
	if l.MTU > 0 {
		configOptions.Update(dhcpv4.Option{Code: dhcpv4.OptionInterfaceMTU, Value: dhcpv4.Uint16(l.MTU)})
	}

	// T1 and T2 at 0.5 and 0.875 of the lease (RFC 2131 section 4.4.5),
	// in whole seconds as on the wire.
	secs := int64(l.Duration / time.Second)
	leaseOptions = dhcpv4.OptionsFromList(
		dhcpv4.OptIPAddressLeaseTime(time.Duration(secs)*time.Second),
		dhcpv4.OptRenewTimeValue(time.Duration(secs/2)*time.Second),
		dhcpv4.OptRebindingTimeValue(time.Duration(secs*7/8)*time.Second),
	)
	maps.Copy(leaseOptions, configOptions)
	return leaseOptions, configOptions, nil
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
			allowed := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
			if !allowed {
				return fmt.Errorf("%q has the character %q", name, c)
			}
		}
	}
	return nil
}
