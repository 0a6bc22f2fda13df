package dhcp

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"github.com/vmop/vmop/test/harness/prereq"
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

// testConfig are testLease's options in any ACK, testLeaseOptions those
// in an OFFER and an ACK to a REQUEST.
var (
	testConfig = Options{
		optSubnetMask: {255, 255, 255, 0},
		optRouter:     {10, 0, 2, 2},
		optDNS:        {10, 0, 2, 3},
		optSearch:     []byte("\x07example\x03com\x00"),
		optDomain:     []byte("example.com"),
		optHostname:   []byte("vm"),
		optMTU:        {0x05, 0xdc},
	}
	testLeaseOptions = with(testConfig, Options{
		optLeaseTime:   {0, 0, 0x0e, 0x10}, // 3600
		optRenewalT1:   {0, 0, 0x07, 0x08}, // 1800
		optRebindingT2: {0, 0, 0x0c, 0x4e}, // 3150
	})
)

func with(o, more Options) Options {
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
		want   Options
	}{
		"nothing optional": {
			func(l *Lease) { *l = Lease{MAC: l.MAC, Addr: l.Addr, Router: l.Router, Duration: 90 * time.Second} },
			Options{
				optSubnetMask: {255, 255, 255, 0}, optRouter: {10, 0, 2, 2},
				optLeaseTime: {0, 0, 0, 90}, optRenewalT1: {0, 0, 0, 45}, optRebindingT2: {0, 0, 0, 78},
			},
		},
		"/32":      {func(l *Lease) { l.Addr = netip.MustParsePrefix("10.0.2.15/32") }, Options{optSubnetMask: {255, 255, 255, 255}}},
		"/9":       {func(l *Lease) { l.Addr = netip.MustParsePrefix("10.0.2.15/9") }, Options{optSubnetMask: {255, 128, 0, 0}}},
		"MTU 9000": {func(l *Lease) { l.MTU = 9000 }, Options{optMTU: {0x23, 0x28}}},
		"MTU 68":   {func(l *Lease) { l.MTU = 68 }, Options{optMTU: {0, 68}}},
		"no MTU":   {func(l *Lease) { l.MTU = 0 }, Options{optMTU: nil}},
		"DNS servers": {
			func(l *Lease) { l.DNS = append(l.DNS, netip.MustParseAddr("192.0.2.53")) },
			Options{optDNS: {10, 0, 2, 3, 192, 0, 2, 53}},
		},
		"longest lease": {
			func(l *Lease) { l.Duration = (1<<32 - 2) * time.Second },
			Options{
				optLeaseTime:   {0xff, 0xff, 0xff, 0xfe},
				optRenewalT1:   {0x7f, 0xff, 0xff, 0xff},
				optRebindingT2: {0xdf, 0xff, 0xff, 0xfe},
			},
		},
		"seconds only": {
			func(l *Lease) { l.Duration = 10*time.Second + 999*time.Millisecond },
			Options{optLeaseTime: {0, 0, 0, 10}, optRenewalT1: {0, 0, 0, 5}, optRebindingT2: {0, 0, 0, 8}},
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

// wire is m as the client receives it.
func wire(t *testing.T, m *Message) *Message {
	t.Helper()
	b, err := m.Marshal()
	require.NoError(t, err)
	m, err = Parse(b)
	require.NoError(t, err)
	return m
}

func TestHandle(t *testing.T) {
	zero := netip.IPv4Unspecified()
	guest := netip.MustParseAddr("10.0.2.15")
	other := netip.MustParseAddr("10.0.2.99")
	lease := testLease()
	clientID := append([]byte{1}, lease.MAC...)
	// request is a client's message as Parse returns it.
	request := func(t MessageType, ciaddr netip.Addr, opts Options) *Message {
		return &Message{
			Op: BootRequest, HType: 1, XID: 42, Secs: 3, Flags: 0x8000,
			CIAddr: ciaddr, YIAddr: zero, SIAddr: zero, GIAddr: zero,
			CHAddr:  lease.MAC,
			Options: with(Options{optMessageType: {byte(t)}, optClientID: clientID}, opts),
		}
	}
	reply := func(t MessageType, ciaddr, yiaddr netip.Addr, opts Options) *Message {
		return &Message{
			Op: BootReply, HType: 1, XID: 42, Flags: 0x8000,
			CIAddr: ciaddr, YIAddr: yiaddr, SIAddr: zero, GIAddr: zero,
			CHAddr:  lease.MAC,
			Options: with(Options{optMessageType: {byte(t)}, optServerID: {10, 0, 2, 2}, optClientID: clientID}, opts),
		}
	}
	broadcast := netip.MustParseAddrPort("255.255.255.255:68")
	nak := reply(Nak, zero, zero, Options{optMessage: []byte("address is 10.0.2.15")})

	for name, tc := range map[string]struct {
		req  *Message
		want *Message
		to   netip.AddrPort
		log  string
	}{
		"discover": {
			req:  request(Discover, zero, nil),
			want: reply(Offer, zero, guest, testLeaseOptions),
			to:   broadcast,
			log:  `level=INFO msg="Offering lease" addr=10.0.2.15/24`,
		},
		"request when selecting": {
			req:  request(Request, zero, Options{optRequestedIP: guest.AsSlice(), optServerID: {10, 0, 2, 2}}),
			want: reply(Ack, zero, guest, testLeaseOptions),
			to:   broadcast,
			log:  `level=INFO msg="Acknowledging lease" addr=10.0.2.15/24 duration=1h0m0s`,
		},
		"request when rebooting": {
			req:  request(Request, zero, Options{optRequestedIP: guest.AsSlice()}),
			want: reply(Ack, zero, guest, testLeaseOptions),
			to:   broadcast,
		},
		"request when renewing": {
			req:  request(Request, guest, nil),
			want: reply(Ack, guest, guest, testLeaseOptions),
			to:   netip.MustParseAddrPort("10.0.2.15:68"),
		},
		"request of another address": {
			req:  request(Request, zero, Options{optRequestedIP: other.AsSlice()}),
			want: nak,
			to:   broadcast,
			log:  `level=INFO msg="Refusing a request for another address" requested=10.0.2.99 addr=10.0.2.15`,
		},
		"renewing another address": {
			req:  request(Request, other, nil),
			want: nak,
			to:   broadcast,
		},
		"request of no address": {
			req:  request(Request, zero, nil),
			want: nak,
			to:   broadcast,
		},
		"request to another server": {
			req: request(Request, zero, Options{optRequestedIP: guest.AsSlice(), optServerID: {10, 0, 2, 1}}),
			log: `level=INFO msg="Guest chose another DHCP server" server=10.0.2.1`,
		},
		"inform": {
			req:  request(Inform, guest, nil),
			want: reply(Ack, guest, zero, testConfig),
			to:   netip.MustParseAddrPort("10.0.2.15:68"),
			log:  `level=INFO msg="Answering DHCPINFORM" client=10.0.2.15`,
		},
		"release": {
			req: request(Release, guest, Options{optServerID: {10, 0, 2, 2}}),
			log: `level=INFO msg="Guest released its lease" addr=10.0.2.15`,
		},
		"decline": {
			req: request(Decline, zero, Options{optRequestedIP: guest.AsSlice(), optServerID: {10, 0, 2, 2}}),
			log: `level=WARN msg="Guest declined its address: another host on the link uses it" addr=10.0.2.15`,
		},
		"no client identifier": {
			req: func() *Message {
				m := request(Discover, zero, nil)
				delete(m.Options, optClientID)
				return m
			}(),
			want: func() *Message {
				m := reply(Offer, zero, guest, testLeaseOptions)
				delete(m.Options, optClientID)
				return m
			}(),
			to: broadcast,
		},
		"another client": {
			req: func() *Message {
				m := request(Discover, zero, nil)
				m.CHAddr = net.HardwareAddr{0x52, 0x54, 0, 0x12, 0x34, 0x57}
				return m
			}(),
			log: `level=DEBUG msg="Ignoring another client" client=52:54:00:12:34:57 type=DHCPDISCOVER`,
		},
		"a reply": {
			req: func() *Message {
				m := request(Offer, zero, nil)
				m.Op = BootReply
				return m
			}(),
			log: `level=DEBUG msg="Ignoring a message that is no request" op=2 type=DHCPOFFER`,
		},
		"BOOTP": {
			req: request(0, zero, Options{optMessageType: nil}),
			log: `level=DEBUG msg="Ignoring message" type="message type 0"`,
		},
		"unknown type": {
			req: request(42, zero, nil),
			log: `level=DEBUG msg="Ignoring message" type="message type 42"`,
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
			got := s.handle(wire(t, tc.req), log)
			if tc.want == nil {
				require.Nil(t, got)
			} else {
				require.NotNil(t, got)
				require.Empty(t, cmp.Diff(tc.want, wire(t, got), addrs))
				require.Equal(t, tc.to, replyAddr(tc.req, got))
			}
			require.Contains(t, logs.String(), tc.log)
		})
	}
}

func TestServeNoInterface(t *testing.T) {
	err := listenAndServe(context.Background(), "vmopd-none", testLease(), slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "dhcp: vmopd-none: ")
	if os.Geteuid() == 0 {
		require.ErrorContains(t, err, "SO_BINDTODEVICE: no such device")
	}
}

// TestServeWithoutPrivileges runs Serve as the user nobody, in a copy of
// this test binary that nobody may run.
func TestServeWithoutPrivileges(t *testing.T) {
	if os.Getenv("VMOP_DHCP_UNPRIVILEGED") == "1" {
		err := listenAndServe(context.Background(), "lo", testLease(), slog.New(slog.DiscardHandler))
		fmt.Printf("Serve: %v\n", err)
		return
	}
	prereq.Root(t, "runs the test binary as nobody")
	exe, err := os.Executable()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "vmop-dhcp-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(exe)
	require.NoError(t, err)
	copied := filepath.Join(dir, filepath.Base(exe))
	require.NoError(t, os.WriteFile(copied, b, 0o755))

	cmd := exec.Command(copied, "-test.run=^TestServeWithoutPrivileges$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "VMOP_DHCP_UNPRIVILEGED=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Serve: dhcp: lo: listen udp4 0.0.0.0:67: bind: permission denied (needs CAP_NET_BIND_SERVICE and CAP_NET_RAW)")
}

// listenAndServe is Listen, then Server.Serve.
func listenAndServe(ctx context.Context, iface string, lease Lease, log *slog.Logger) error {
	srv, err := Listen(ctx, iface, lease)
	if err != nil {
		return err
	}
	return srv.Serve(ctx, log)
}
