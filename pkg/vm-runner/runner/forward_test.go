package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
)

// fakeForwarder records the forwards; its first refusals refusals are of
// taken ports.
type fakeForwarder struct {
	calls    []string
	refusals int
}

func (f *fakeForwarder) HostfwdAdd(_ context.Context, netdev string, host, guest netip.AddrPort) error {
	f.calls = append(f.calls, fmt.Sprintf("add %s %s", netdev, guestString(guest)))
	if f.refusals > 0 {
		f.refusals--
		return errors.New("Could not set up host forwarding rule")
	}
	if !host.Addr().IsLoopback() || host.Port() == 0 {
		return fmt.Errorf("host %s: not a port of the loopback address", host)
	}
	return nil
}

func (f *fakeForwarder) HostfwdRemove(_ context.Context, netdev string, _ netip.AddrPort) error {
	f.calls = append(f.calls, "remove "+netdev)
	return nil
}

func port(p uint16) netip.AddrPort { return netip.AddrPortFrom(netip.Addr{}, p) }

func TestForwardsShareAndRelease(t *testing.T) {
	var f forwards
	fw := &fakeForwarder{}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := t.Context()

	a, releaseA, err := f.acquire(ctx, fw, log, "net0", port(22))
	require.NoError(t, err)
	b, releaseB, err := f.acquire(ctx, fw, log, "net0", port(22))
	require.NoError(t, err)
	require.Equal(t, a, b, "one forward per guest port")
	// The same port at another address of the guest is another forward.
	d, releaseD, err := f.acquire(ctx, fw, log, "net0", netip.MustParseAddrPort("10.0.2.20:22"))
	require.NoError(t, err)
	require.NotEqual(t, a, d)
	releaseD()
	require.Equal(t, []string{"add net0 :22", "add net0 10.0.2.20:22", "remove net0"}, fw.calls)
	fw.calls = fw.calls[:1]
	c, releaseC, err := f.acquire(ctx, fw, log, "net0", port(80))
	require.NoError(t, err)
	require.NotEqual(t, a, c)
	require.Equal(t, []string{"add net0 :22", "add net0 :80"}, fw.calls)

	releaseA()
	releaseA() // twice is once
	require.Equal(t, []string{"add net0 :22", "add net0 :80"}, fw.calls, "b still uses port 22")
	releaseB()
	releaseC()
	require.Equal(t, []string{"add net0 :22", "add net0 :80", "remove net0", "remove net0"}, fw.calls)
	require.Empty(t, f.byGuest)

	// A port that another process took between the pick and qemu's bind.
	fw = &fakeForwarder{refusals: forwardAttempts - 1}
	_, release, err := f.acquire(ctx, fw, log, "net0", port(22))
	require.NoError(t, err)
	release()
	fw = &fakeForwarder{refusals: forwardAttempts}
	_, _, err = f.acquire(ctx, fw, log, "net0", port(22))
	require.EqualError(t, err, "cannot forward to guest port 22: Could not set up host forwarding rule")
	require.Empty(t, f.byGuest, "a failed forward is not kept")
}

func TestGuestAddress(t *testing.T) {
	iface := func(name string, addrs ...string) guestagent.Interface {
		i := guestagent.Interface{Name: name}
		for _, a := range addrs {
			i.IPAddresses = append(i.IPAddresses, guestagent.IPAddress{Address: a})
		}
		return i
	}
	for _, c := range []struct {
		name string
		info *guestagent.Info
		mac  string
		want string
	}{
		{"no agent", nil, "", ""},
		{"loopback and link-local only", &guestagent.Info{Interfaces: []guestagent.Interface{
			iface("lo", "127.0.0.1", "::1"), iface("eth0", "fe80::1", "169.254.3.4")}}, "", ""},
		{"IPv4 before IPv6", &guestagent.Info{Interfaces: []guestagent.Interface{
			iface("lo", "127.0.0.1"), iface("eth0", "fe80::1", "2001:db8::5"), iface("eth1", "192.168.7.20")}}, "", "192.168.7.20"},
		{"IPv6 only", &guestagent.Info{Interfaces: []guestagent.Interface{
			iface("eth0", "2001:db8::5", "2001:db8::6")}}, "", "2001:db8::5"},
		{"garbage is skipped", &guestagent.Info{Interfaces: []guestagent.Interface{
			iface("eth0", "not an address", "10.1.2.3")}}, "", "10.1.2.3"},
		{"the NIC's", &guestagent.Info{Interfaces: []guestagent.Interface{
			iface("eth0", "10.1.2.3"), {Name: "eth1", HardwareAddress: "52:54:00:12:34:56",
				IPAddresses: []guestagent.IPAddress{{Address: "10.0.2.20"}}}}}, "52:54:00:12:34:56", "10.0.2.20"},
		{"not the NIC's", &guestagent.Info{Interfaces: []guestagent.Interface{
			iface("eth0", "10.1.2.3")}}, "52:54:00:12:34:56", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			ip, ok := guestAddress(c.info, c.mac)
			require.Equal(t, c.want != "", ok)
			if ok {
				require.Equal(t, c.want, ip.String())
			}
		})
	}
}
