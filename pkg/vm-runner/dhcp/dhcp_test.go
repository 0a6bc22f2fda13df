package dhcp

import (
	"bytes"
	"context"
	"encoding/hex"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
	"github.com/stretchr/testify/require"
)

func testLease() Lease {
	return Lease{
		MAC:      net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x56},
		Addr:     netip.MustParsePrefix("10.0.2.15/24"),
		Router:   netip.MustParseAddr("10.0.2.2"),
		DNS:      []netip.Addr{netip.MustParseAddr("10.0.2.3")},
		Search:   []string{"example.com"},
		Domain:   "example.com",
		Hostname: "vm",
		MTU:      1500,
		Duration: time.Hour,
	}
}

// Option codes, for the tables.
var (
	optSubnetMask  = dhcpv4.OptionSubnetMask.Code()
	optRouter      = dhcpv4.OptionRouter.Code()
	optDNS         = dhcpv4.OptionDomainNameServer.Code()
	optHostname    = dhcpv4.OptionHostName.Code()
	optDomain      = dhcpv4.OptionDomainName.Code()
	optMTU         = dhcpv4.OptionInterfaceMTU.Code()
	optRequestedIP = dhcpv4.OptionRequestedIPAddress.Code()
	optLeaseTime   = dhcpv4.OptionIPAddressLeaseTime.Code()
	optMessageType = dhcpv4.OptionDHCPMessageType.Code()
	optServerID    = dhcpv4.OptionServerIdentifier.Code()
	optMessage     = dhcpv4.OptionMessage.Code()
	optRenewalT1   = dhcpv4.OptionRenewTimeValue.Code()
	optRebindingT2 = dhcpv4.OptionRebindingTimeValue.Code()
	optClientID    = dhcpv4.OptionClientIdentifier.Code()
	optSearch      = dhcpv4.OptionDNSDomainSearchList.Code()
	optRelayAgent  = dhcpv4.OptionRelayAgentInformation.Code()
)

// testConfig are testLease's options in any ACK, testLeaseOptions those
// in an OFFER and an ACK to a REQUEST, as on the wire.
var (
	testConfig = dhcpv4.Options{
		optSubnetMask: {255, 255, 255, 0},
		optRouter:     {10, 0, 2, 2},
		optDNS:        {10, 0, 2, 3},
		optSearch:     []byte("\x07example\x03com\x00"),
		optDomain:     []byte("example.com"),
		optHostname:   []byte("vm"),
		optMTU:        {0x05, 0xdc},
	}
	testLeaseOptions = with(testConfig, dhcpv4.Options{
		optLeaseTime:   {0, 0, 0x0e, 0x10}, // 3600
		optRenewalT1:   {0, 0, 0x07, 0x08}, // 1800
		optRebindingT2: {0, 0, 0x0c, 0x4e}, // 3150
	})
)

func with(o, more dhcpv4.Options) dhcpv4.Options {
	o = maps.Clone(o)
	maps.Copy(o, more)
	return o
}

func TestLeaseOptions(t *testing.T) {
	leaseOpts, configOpts, err := testLease().options()
	require.NoError(t, err)
	require.Equal(t, testLeaseOptions, leaseOpts)
	require.Equal(t, testConfig, configOpts)

	for name, tc := range map[string]struct {
		change func(*Lease)
		want   dhcpv4.Options
	}{
		"nothing optional": {
			func(l *Lease) { *l = Lease{MAC: l.MAC, Addr: l.Addr, Router: l.Router, Duration: 90 * time.Second} },
			dhcpv4.Options{
				optSubnetMask: {255, 255, 255, 0}, optRouter: {10, 0, 2, 2},
				optLeaseTime: {0, 0, 0, 90}, optRenewalT1: {0, 0, 0, 45}, optRebindingT2: {0, 0, 0, 78},
			},
		},
		"/32":      {func(l *Lease) { l.Addr = netip.MustParsePrefix("10.0.2.15/32") }, dhcpv4.Options{optSubnetMask: {255, 255, 255, 255}}},
		"/9":       {func(l *Lease) { l.Addr = netip.MustParsePrefix("10.0.2.15/9") }, dhcpv4.Options{optSubnetMask: {255, 128, 0, 0}}},
		"MTU 9000": {func(l *Lease) { l.MTU = 9000 }, dhcpv4.Options{optMTU: {0x23, 0x28}}},
		"MTU 68":   {func(l *Lease) { l.MTU = 68 }, dhcpv4.Options{optMTU: {0, 68}}},
		"no MTU":   {func(l *Lease) { l.MTU = 0 }, dhcpv4.Options{optMTU: nil}},
		"DNS servers": {
			func(l *Lease) { l.DNS = append(l.DNS, netip.MustParseAddr("192.0.2.53")) },
			dhcpv4.Options{optDNS: {10, 0, 2, 3, 192, 0, 2, 53}},
		},
		// RFC 3397's encoding, without its compression.
		"kubernetes search": {
			func(l *Lease) {
				l.Search = []string{"default.svc.cluster.local", "svc.cluster.local.", "cluster.local"}
			},
			dhcpv4.Options{optSearch: []byte("\x07default\x03svc\x07cluster\x05local\x00" +
				"\x03svc\x07cluster\x05local\x00\x07cluster\x05local\x00")},
		},
		"trailing dots": {
			func(l *Lease) { l.Search, l.Domain, l.Hostname = []string{"example.com."}, "example.com.", "vm." },
			dhcpv4.Options{optDomain: []byte("example.com."), optHostname: []byte("vm.")},
		},
		"longest lease": {
			func(l *Lease) { l.Duration = (1<<32 - 2) * time.Second },
			dhcpv4.Options{
				optLeaseTime:   {0xff, 0xff, 0xff, 0xfe},
				optRenewalT1:   {0x7f, 0xff, 0xff, 0xff},
				optRebindingT2: {0xdf, 0xff, 0xff, 0xfe},
			},
		},
		"seconds only": {
			func(l *Lease) { l.Duration = 10*time.Second + 999*time.Millisecond },
			dhcpv4.Options{optLeaseTime: {0, 0, 0, 10}, optRenewalT1: {0, 0, 0, 5}, optRebindingT2: {0, 0, 0, 8}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := testLease()
			tc.change(&l)
			got, _, err := l.options()
			require.NoError(t, err)
			if name != "nothing optional" {
				tc.want = with(testLeaseOptions, tc.want)
				maps.DeleteFunc(tc.want, func(_ uint8, v []byte) bool { return v == nil })
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestLeaseInvalid(t *testing.T) {
	for name, tc := range map[string]struct {
		change func(*Lease)
		want   string
	}{
		"no MAC":          {func(l *Lease) { l.MAC = nil }, `lease: MAC "" is not 1 to 16 bytes`},
		"no address":      {func(l *Lease) { l.Addr = netip.Prefix{} }, "52:54:00:12:34:56: address invalid Prefix is not an IPv4 prefix"},
		"IPv6 address":    {func(l *Lease) { l.Addr = netip.MustParsePrefix("fd00::2/64") }, "address fd00::2/64 is not an IPv4 prefix"},
		"/0":              {func(l *Lease) { l.Addr = netip.MustParsePrefix("10.0.2.15/0") }, "address 10.0.2.15/0 is not"},
		"no router":       {func(l *Lease) { l.Router = netip.Addr{} }, "router invalid IP is not an IPv4 address"},
		"router is guest": {func(l *Lease) { l.Router = l.Addr.Addr() }, "router 10.0.2.15 is the guest's address"},
		"IPv6 DNS":        {func(l *Lease) { l.DNS = []netip.Addr{netip.MustParseAddr("::1")} }, "DNS server ::1 is not"},
		"MTU 67":          {func(l *Lease) { l.MTU = 67 }, "MTU 67 is not 68 to 65535"},
		"MTU 65536":       {func(l *Lease) { l.MTU = 65536 }, "MTU 65536 is not 68 to 65535"},
		"no duration":     {func(l *Lease) { l.Duration = 0 }, "duration 0s is not 1s to 4294967294s"},
		"forever":         {func(l *Lease) { l.Duration = (1<<32 - 1) * time.Second }, "duration 1193046h28m15s is not"},
		"bad search":      {func(l *Lease) { l.Search = []string{"ok.example", "a b"} }, `search: "a b" has the character ' '`},
		"bad domain":      {func(l *Lease) { l.Domain = "a..b" }, `domain: "a..b" has a label that is not 1 to 63 bytes`},
		"bad hostname":    {func(l *Lease) { l.Hostname = "vm;reboot" }, `hostname: "vm;reboot" has the character ';'`},
	} {
		t.Run(name, func(t *testing.T) {
			l := testLease()
			tc.change(&l)
			_, _, err := l.options()
			require.ErrorContains(t, err, tc.want)
			// Serve refuses it before listening.
			err = listenAndServe(context.Background(), "lo", l, slog.New(slog.DiscardHandler))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// wire is m as the other end receives it.
func wire(t testing.TB, m *dhcpv4.DHCPv4) *dhcpv4.DHCPv4 {
	t.Helper()
	m, err := dhcpv4.FromBytes(m.ToBytes())
	require.NoError(t, err)
	return m
}

func TestHandle(t *testing.T) {
	zero := net.IP{0, 0, 0, 0}
	guest := net.IP{10, 0, 2, 15}
	other := net.IP{10, 0, 2, 99}
	lease := testLease()
	clientID := append([]byte{1}, lease.MAC...)
	xid := dhcpv4.TransactionID{0, 0, 0, 42}
	// request is a client's message.
	request := func(t dhcpv4.MessageType, ciaddr net.IP, opts dhcpv4.Options) *dhcpv4.DHCPv4 {
		return &dhcpv4.DHCPv4{
			OpCode: dhcpv4.OpcodeBootRequest, HWType: iana.HWTypeEthernet, TransactionID: xid, NumSeconds: 3, Flags: 0x8000,
			ClientIPAddr: ciaddr, ClientHWAddr: lease.MAC,
			Options: with(dhcpv4.Options{optMessageType: {byte(t)}, optClientID: clientID}, opts),
		}
	}
	// reply is the server's message as the client parses it.
	reply := func(t dhcpv4.MessageType, ciaddr, yiaddr net.IP, opts dhcpv4.Options) *dhcpv4.DHCPv4 {
		return &dhcpv4.DHCPv4{
			OpCode: dhcpv4.OpcodeBootReply, HWType: iana.HWTypeEthernet, TransactionID: xid, Flags: 0x8000,
			ClientIPAddr: ciaddr, YourIPAddr: yiaddr, ServerIPAddr: zero, GatewayIPAddr: zero,
			ClientHWAddr: lease.MAC,
			Options:      with(dhcpv4.Options{optMessageType: {byte(t)}, optServerID: {10, 0, 2, 2}, optClientID: clientID}, opts),
		}
	}
	broadcast := netip.MustParseAddrPort("255.255.255.255:68")
	nak := reply(dhcpv4.MessageTypeNak, zero, zero, dhcpv4.Options{optMessage: []byte("address is 10.0.2.15")})

	for name, tc := range map[string]struct {
		req  *dhcpv4.DHCPv4
		want *dhcpv4.DHCPv4
		to   netip.AddrPort
		log  string
	}{
		"discover": {
			req:  request(dhcpv4.MessageTypeDiscover, zero, nil),
			want: reply(dhcpv4.MessageTypeOffer, zero, guest, testLeaseOptions),
			to:   broadcast,
			log:  `level=INFO msg="Offering lease" addr=10.0.2.15/24`,
		},
		"request when selecting": {
			req:  request(dhcpv4.MessageTypeRequest, zero, dhcpv4.Options{optRequestedIP: guest, optServerID: {10, 0, 2, 2}}),
			want: reply(dhcpv4.MessageTypeAck, zero, guest, testLeaseOptions),
			to:   broadcast,
			log:  `level=INFO msg="Acknowledging lease" addr=10.0.2.15/24 duration=1h0m0s`,
		},
		"request when rebooting": {
			req:  request(dhcpv4.MessageTypeRequest, zero, dhcpv4.Options{optRequestedIP: guest}),
			want: reply(dhcpv4.MessageTypeAck, zero, guest, testLeaseOptions),
			to:   broadcast,
		},
		"request when renewing": {
			req:  request(dhcpv4.MessageTypeRequest, guest, nil),
			want: reply(dhcpv4.MessageTypeAck, guest, guest, testLeaseOptions),
			to:   netip.MustParseAddrPort("10.0.2.15:68"),
		},
		"request of another address": {
			req:  request(dhcpv4.MessageTypeRequest, zero, dhcpv4.Options{optRequestedIP: other}),
			want: nak,
			to:   broadcast,
			log:  `level=INFO msg="Refusing a request for another address" requested=10.0.2.99 addr=10.0.2.15`,
		},
		"renewing another address": {
			req:  request(dhcpv4.MessageTypeRequest, other, nil),
			want: nak,
			to:   broadcast,
		},
		"request of no address": {
			req:  request(dhcpv4.MessageTypeRequest, zero, nil),
			want: nak,
			to:   broadcast,
		},
		// Neither an address nor a server identifier of other than 4 bytes.
		"request of a malformed address": {
			req:  request(dhcpv4.MessageTypeRequest, zero, dhcpv4.Options{optRequestedIP: {10, 0, 2, 15, 0}, optServerID: {10, 0, 2}}),
			want: nak,
			to:   broadcast,
		},
		"request to another server": {
			req: request(dhcpv4.MessageTypeRequest, zero, dhcpv4.Options{optRequestedIP: guest, optServerID: {10, 0, 2, 1}}),
			log: `level=INFO msg="Guest chose another DHCP server" server=10.0.2.1`,
		},
		"inform": {
			req:  request(dhcpv4.MessageTypeInform, guest, nil),
			want: reply(dhcpv4.MessageTypeAck, guest, zero, testConfig),
			to:   netip.MustParseAddrPort("10.0.2.15:68"),
			log:  `level=INFO msg="Answering DHCPINFORM" client=10.0.2.15`,
		},
		"release": {
			req: request(dhcpv4.MessageTypeRelease, guest, dhcpv4.Options{optServerID: {10, 0, 2, 2}}),
			log: `level=INFO msg="Guest released its lease" addr=10.0.2.15`,
		},
		"decline": {
			req: request(dhcpv4.MessageTypeDecline, zero, dhcpv4.Options{optRequestedIP: guest, optServerID: {10, 0, 2, 2}}),
			log: `level=WARN msg="Guest declined its address: another host on the link uses it" addr=10.0.2.15`,
		},
		"no client identifier": {
			req: func() *dhcpv4.DHCPv4 {
				m := request(dhcpv4.MessageTypeDiscover, zero, nil)
				delete(m.Options, optClientID)
				return m
			}(),
			want: func() *dhcpv4.DHCPv4 {
				m := reply(dhcpv4.MessageTypeOffer, zero, guest, testLeaseOptions)
				delete(m.Options, optClientID)
				return m
			}(),
			to: broadcast,
		},
		// RFC 3046 section 2.2, as dhcpv4 builds a reply.
		"relay agent information": {
			req:  request(dhcpv4.MessageTypeDiscover, zero, dhcpv4.Options{optRelayAgent: {1, 2, 'a', 'b'}}),
			want: reply(dhcpv4.MessageTypeOffer, zero, guest, with(testLeaseOptions, dhcpv4.Options{optRelayAgent: {1, 2, 'a', 'b'}})),
			to:   broadcast,
		},
		"another client": {
			req: func() *dhcpv4.DHCPv4 {
				m := request(dhcpv4.MessageTypeDiscover, zero, nil)
				m.ClientHWAddr = net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x57}
				return m
			}(),
			log: `level=DEBUG msg="Ignoring another client" client=52:54:00:12:34:57 type=DISCOVER`,
		},
		"a reply": {
			req: func() *dhcpv4.DHCPv4 {
				m := request(dhcpv4.MessageTypeOffer, zero, nil)
				m.OpCode = dhcpv4.OpcodeBootReply
				return m
			}(),
			log: `level=DEBUG msg="Ignoring a message that is no request" op=BootReply type=OFFER`,
		},
		"BOOTP": {
			req: request(0, zero, dhcpv4.Options{optMessageType: nil}),
			log: `level=DEBUG msg="Ignoring message" type="unknown (0)"`,
		},
		"unknown type": {
			req: request(42, zero, nil),
			log: `level=DEBUG msg="Ignoring message" type="unknown (42)"`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			var logs strings.Builder
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{
				Level: slog.LevelDebug,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{}
					}
					return a
				},
			}))
			s, err := newServer(lease)
			require.NoError(t, err)
			if tc.req.Options[optMessageType] == nil {
				delete(tc.req.Options, optMessageType)
			}
			req := wire(t, tc.req)
			got := s.handle(req, log)
			if tc.want == nil {
				require.Nil(t, got)
			} else {
				require.NotNil(t, got)
				require.Empty(t, cmp.Diff(tc.want, wire(t, got)))
				require.Equal(t, tc.to, replyAddr(req, got))
			}
			require.Contains(t, logs.String(), tc.log)
		})
	}
}

// udhcpcLease is the lease of the client whose messages are in testdata.
func udhcpcLease() Lease {
	l := testLease()
	l.MAC = net.HardwareAddr{2, 0, 0x5e, 0, 1, 1}
	l.Addr = netip.MustParsePrefix("192.0.2.15/24")
	l.Router = netip.MustParseAddr("192.0.2.1")
	return l
}

// packet is a message captured from a real client, in testdata.
func packet(t testing.TB, name string) []byte {
	t.Helper()
	h, err := os.ReadFile(filepath.Join("testdata", name+".hex"))
	require.NoError(t, err)
	b, err := hex.DecodeString(strings.TrimSpace(string(h)))
	require.NoError(t, err)
	return b
}

// TestHandleUdhcpc answers the messages busybox's udhcpc 1.35 sent.
func TestHandleUdhcpc(t *testing.T) {
	s, err := newServer(udhcpcLease())
	require.NoError(t, err)
	guest := net.IP{192, 0, 2, 15}
	for name, tc := range map[string]struct {
		want   dhcpv4.MessageType
		ciaddr net.IP
		to     string
	}{
		"udhcpc-discover": {dhcpv4.MessageTypeOffer, net.IPv4zero, "255.255.255.255:68"},
		"udhcpc-request":  {dhcpv4.MessageTypeAck, net.IPv4zero, "255.255.255.255:68"},
		"udhcpc-renew":    {dhcpv4.MessageTypeAck, guest, "192.0.2.15:68"},
	} {
		t.Run(name, func(t *testing.T) {
			req, err := dhcpv4.FromBytes(packet(t, name))
			require.NoError(t, err)
			got := s.handle(req, slog.New(slog.DiscardHandler))
			require.NotNil(t, got)
			got = wire(t, got)
			require.Equal(t, tc.want, got.MessageType())
			require.Equal(t, req.TransactionID, got.TransactionID)
			require.Equal(t, net.HardwareAddr{2, 0, 0x5e, 0, 1, 1}, got.ClientHWAddr)
			require.True(t, got.YourIPAddr.Equal(guest), "yiaddr %v", got.YourIPAddr)
			require.True(t, got.ClientIPAddr.Equal(tc.ciaddr), "ciaddr %v", got.ClientIPAddr)
			require.Equal(t, []byte{192, 0, 2, 1}, got.Options[optServerID])
			require.Equal(t, []byte{1, 2, 0, 0x5e, 0, 1, 1}, got.Options[optClientID])
			require.Equal(t, []byte{0, 0, 0x0e, 0x10}, got.Options[optLeaseTime])
			require.Equal(t, netip.MustParseAddrPort(tc.to), replyAddr(req, got))
			require.GreaterOrEqual(t, len(got.ToBytes()), 300, "BOOTP's minimum size")
		})
	}
}

// FuzzHandle holds the server to never panicking on what a guest sends,
// and to answering only the guest's requests, with its own lease.
func FuzzHandle(f *testing.F) {
	lease := udhcpcLease()
	s, err := newServer(lease)
	require.NoError(f, err)
	for _, name := range []string{"udhcpc-discover", "udhcpc-request", "udhcpc-renew"} {
		f.Add(packet(f, name))
	}
	req, err := dhcpv4.FromBytes(packet(f, "udhcpc-discover"))
	require.NoError(f, err)
	req.UpdateOption(dhcpv4.OptMessageType(dhcpv4.MessageTypeInform))
	f.Add(req.ToBytes())
	answers := map[dhcpv4.MessageType][]dhcpv4.MessageType{
		dhcpv4.MessageTypeDiscover: {dhcpv4.MessageTypeOffer},
		dhcpv4.MessageTypeRequest:  {dhcpv4.MessageTypeAck, dhcpv4.MessageTypeNak},
		dhcpv4.MessageTypeInform:   {dhcpv4.MessageTypeAck},
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		reply := s.handle(req, slog.New(slog.DiscardHandler))
		if reply == nil {
			return
		}
		if req.OpCode != dhcpv4.OpcodeBootRequest || !bytes.Equal(req.ClientHWAddr, lease.MAC) {
			t.Fatalf("answered op %v from %v", req.OpCode, req.ClientHWAddr)
		}
		if !slices.Contains(answers[req.MessageType()], reply.MessageType()) {
			t.Fatalf("answered %v with %v", req.MessageType(), reply.MessageType())
		}
		got, err := dhcpv4.FromBytes(reply.ToBytes())
		if err != nil {
			t.Fatalf("reply does not parse: %v", err)
		}
		yiaddr, _ := netip.AddrFromSlice(got.YourIPAddr)
		if got.OpCode != dhcpv4.OpcodeBootReply || got.TransactionID != req.TransactionID ||
			!bytes.Equal(got.ClientHWAddr, lease.MAC) || !got.ServerIdentifier().Equal(s.router) ||
			yiaddr != lease.Addr.Addr() && !yiaddr.IsUnspecified() {
			t.Fatalf("reply:\n%s", got.Summary())
		}
		if yiaddr == lease.Addr.Addr() && !bytes.Equal(got.Options[optLeaseTime], s.leaseOpts[optLeaseTime]) {
			t.Fatalf("lease without its time:\n%s", got.Summary())
		}
		if to := replyAddr(req, got); to.Port() != dhcpv4.ClientPort {
			t.Fatalf("reply to %v", to)
		}
	})
}

func TestServeNoInterface(t *testing.T) {
	err := listenAndServe(context.Background(), "vmopd-none", testLease(), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "dhcp: vmopd-none: ")
	if os.Geteuid() == 0 {
		require.ErrorContains(t, err, "SO_BINDTODEVICE: no such device")
	}
}

// listenAndServe is Listen, then Server.Serve.
func listenAndServe(ctx context.Context, iface string, lease Lease, log *slog.Logger) error {
	srv, err := Listen(ctx, iface, lease)
	if err != nil {
		return err
	}
	return srv.Serve(ctx, log)
}
