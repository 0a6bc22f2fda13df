package dhcp

import (
	"bytes"
	"encoding/hex"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"
)

// addrs compares netip.Addr by ==, which go-cmp cannot do on its own.
var addrs = cmpopts.EquateComparable(netip.Addr{})

// packet is a message captured from a real client, in testdata.
func packet(t testing.TB, name string) []byte {
	t.Helper()
	h, err := os.ReadFile(filepath.Join("testdata", name+".hex"))
	require.NoError(t, err)
	b, err := hex.DecodeString(strings.TrimSpace(string(h)))
	require.NoError(t, err)
	return b
}

// udhcpcOptions are what busybox's udhcpc 1.35 sends in every message.
func udhcpcOptions(t MessageType, more Options) Options {
	o := Options{
		optMessageType: {byte(t)},
		57:             {2, 64}, // maximum message size 576
		55:             {1, 3, 6, 12, 15, 28, 42},
		60:             []byte("udhcp 1.35.0"),
		optClientID:    {1, 2, 0, 0x5e, 0, 1, 1},
	}
	maps.Copy(o, more)
	return o
}

func TestParseUdhcpc(t *testing.T) {
	zero := netip.IPv4Unspecified()
	guest := netip.MustParseAddr("192.0.2.15")
	mac := []byte{2, 0, 0x5e, 0, 1, 1}
	for name, want := range map[string]*Message{
		"udhcpc-discover": {
			Op: BootRequest, HType: 1, XID: 0xe49da43e,
			CIAddr: zero, YIAddr: zero, SIAddr: zero, GIAddr: zero, CHAddr: mac,
			Options: udhcpcOptions(Discover, nil),
		},
		"udhcpc-request": {
			Op: BootRequest, HType: 1, XID: 0xe49da43e,
			CIAddr: zero, YIAddr: zero, SIAddr: zero, GIAddr: zero, CHAddr: mac,
			Options: udhcpcOptions(Request, Options{
				optRequestedIP: {192, 0, 2, 15},
				optServerID:    {192, 0, 2, 1},
			}),
		},
		"udhcpc-renew": {
			Op: BootRequest, HType: 1, XID: 0xe49da43e,
			CIAddr: guest, YIAddr: zero, SIAddr: zero, GIAddr: zero, CHAddr: mac,
			Options: udhcpcOptions(Request, nil),
		},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := Parse(packet(t, name))
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(want, m, addrs))
		})
	}
}

func TestRoundTrip(t *testing.T) {
	long := bytes.Repeat([]byte("0123456789"), 60) // 600 bytes: three instances
	for name, m := range map[string]*Message{
		"offer": {
			Op: BootReply, HType: 1, Hops: 1, XID: 0x01020304, Secs: 7, Flags: 0x8000,
			CIAddr: netip.MustParseAddr("0.0.0.0"),
			YIAddr: netip.MustParseAddr("10.0.2.15"),
			SIAddr: netip.MustParseAddr("10.0.2.2"),
			GIAddr: netip.MustParseAddr("10.0.0.1"),
			CHAddr: []byte{0x52, 0x54, 0, 0x12, 0x34, 0x56},
			Options: Options{
				optMessageType: {byte(Offer)},
				optSubnetMask:  {255, 255, 255, 0},
				optLeaseTime:   {0, 0, 0x0e, 0x10},
				optHostname:    []byte("vm"),
			},
		},
		"long options and an empty one": {
			Op: BootRequest, HType: 1, XID: 1,
			CIAddr: netip.MustParseAddr("0.0.0.0"), YIAddr: netip.MustParseAddr("0.0.0.0"),
			SIAddr: netip.MustParseAddr("0.0.0.0"), GIAddr: netip.MustParseAddr("0.0.0.0"),
			CHAddr:  bytes.Repeat([]byte{0xab}, 16),
			Options: Options{optSearch: long, 254: {}, 1: {1}},
		},
		"no hardware address, no options": {
			Op:     BootRequest,
			CIAddr: netip.MustParseAddr("1.2.3.4"), YIAddr: netip.MustParseAddr("0.0.0.0"),
			SIAddr: netip.MustParseAddr("0.0.0.0"), GIAddr: netip.MustParseAddr("255.255.255.255"),
			Options: Options{},
		},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := m.Marshal()
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(b), minMessageLen)
			got, err := Parse(b)
			require.NoError(t, err)
			require.Empty(t, cmp.Diff(m, got, addrs, cmpopts.EquateEmpty()))
		})
	}
}

func TestMarshalLayout(t *testing.T) {
	m := &Message{
		Op:     BootReply,
		CHAddr: []byte{1, 2, 3, 4, 5, 6},
		// The message type goes first, then by code; a long option is
		// split in instances of at most 255 bytes.
		Options: Options{optSearch: bytes.Repeat([]byte{'x'}, 256), optRouter: {10, 0, 0, 1}, optMessageType: {byte(Ack)}},
	}
	b, err := m.Marshal()
	require.NoError(t, err)
	want := []byte{optMessageType, 1, byte(Ack), optRouter, 4, 10, 0, 0, 1, optSearch, 255}
	want = append(want, bytes.Repeat([]byte{'x'}, 255)...)
	want = append(want, optSearch, 1, 'x', optEnd)
	require.Equal(t, want, b[offOptions:offOptions+len(want)])
	require.Equal(t, uint8(6), b[2], "hlen")
	require.Equal(t, magicCookie, b[offCookie:offOptions])
}

func TestMarshalErrors(t *testing.T) {
	for name, m := range map[string]*Message{
		"long hardware address": {CHAddr: make([]byte, 17)},
		"IPv6 address":          {YIAddr: netip.MustParseAddr("::1")},
		"pad option":            {Options: Options{optPad: {1}}},
		"end option":            {Options: Options{optEnd: {}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := m.Marshal()
			require.Error(t, err)
		})
	}
}

func TestParseOverload(t *testing.T) {
	b := make([]byte, offOptions, 300)
	b[0], b[1], b[2] = BootRequest, 1, 6
	copy(b[offCookie:], magicCookie)
	copy(b[offFile:], []byte{optHostname, 2, 'v', 'm', optEnd})
	copy(b[offSName:], []byte{optHostname, 1, '1', optDomain, 1, 'd', optEnd})
	b = append(b, optMessageType, 1, byte(Discover), optOverload, 1, 3, optEnd)
	m, err := Parse(b)
	require.NoError(t, err)
	// Options, then file, then sname; option 52 itself is consumed.
	require.Equal(t, Options{
		optMessageType: {byte(Discover)},
		optHostname:    []byte("vm1"),
		optDomain:      []byte("d"),
	}, m.Options)
}

func TestParseErrors(t *testing.T) {
	valid := func(options ...byte) []byte {
		b := make([]byte, offOptions)
		b[0], b[1], b[2] = BootRequest, 1, 6
		copy(b[offCookie:], magicCookie)
		return append(b, options...)
	}
	for name, tc := range map[string]struct {
		b    []byte
		want string
	}{
		"empty":             {nil, "message of 0 bytes"},
		"short":             {valid()[:offOptions-1], "message of 239 bytes"},
		"no magic cookie":   {make([]byte, 300), "magic cookie"},
		"hlen 17":           {func() []byte { b := valid(); b[2] = 17; return b }(), "hardware address length 17"},
		"no option length":  {valid(optMessageType), "options: option 53 truncated"},
		"option too long":   {valid(optMessageType, 2, 1), "options: option 53 truncated"},
		"overload 4":        {valid(optOverload, 1, 4), "option overload [4]"},
		"overload two":      {valid(optOverload, 2, 1, 1), "option overload [1 1]"},
		"truncated in file": {func() []byte { b := valid(optOverload, 1, 1); b[offCookie-1] = 12; return b }(), "file: option 12 truncated"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tc.b)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// Without an end option the options end with the message.
	m, err := Parse(valid(optMessageType, 1, byte(Inform)))
	require.NoError(t, err)
	require.Equal(t, Inform, m.Type())
}

// FuzzParse holds Parse to never panicking, and what it parses to
// surviving Marshal and Parse unchanged.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"udhcpc-discover", "udhcpc-request", "udhcpc-renew"} {
		f.Add(packet(f, name))
	}
	s, err := newServer(testLease())
	require.NoError(f, err)
	req, err := Parse(packet(f, "udhcpc-discover"))
	require.NoError(f, err)
	offer, err := s.reply(req, Offer, testLease().Addr.Addr(), s.leaseOpts).Marshal()
	require.NoError(f, err)
	f.Add(offer)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Parse(b)
		if err != nil {
			return
		}
		out, err := m.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a parsed message: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse of a marshalled message: %v", err)
		}
		if diff := cmp.Diff(m, again, addrs, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("round trip (-parsed +again):\n%s", diff)
		}
	})
}
