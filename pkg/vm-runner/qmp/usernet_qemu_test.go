//go:build linux

package qmp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/freeport"

	"github.com/stretchr/testify/require"
)

// TestQEMUHostfwd adds and removes slirp host forwards on a real qemu
// (restrict=on: the guest reaches nothing outside, forwards still work).
func TestQEMUHostfwd(t *testing.T) {
	q := startQEMU(t, qemuOpts{extra: []string{
		"-netdev", "user,id=u0,restrict=on",
		"-device", "virtio-net-pci,netdev=u0",
		// Neither a netdev without a NIC nor a socket one is listed.
		"-netdev", "user,id=u1,restrict=on,net=10.0.3.0/24",
		"-netdev", "socket,id=s0,listen=127.0.0.1:0",
	}})
	m := q.dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	ids, err := m.UserNetdevs(ctx)
	require.NoError(t, err)
	require.Equal(t, []UserNetdev{{ID: "u0", MAC: "52:54:00:12:34:56"}}, ids, "the user netdevs with a NIC")

	host := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(freeport.Get(t)))
	require.NoError(t, m.HostfwdAdd(ctx, "u0", host, netip.AddrPortFrom(netip.Addr{}, 22)))
	// slirp accepts on the host side before it connects in the guest.
	c, err := net.DialTimeout("tcp", host.String(), 5*time.Second)
	require.NoError(t, err, "the forward's host port")
	c.Close()

	err = m.HostfwdAdd(ctx, "u1", host, netip.AddrPortFrom(netip.Addr{}, 22))
	require.ErrorContains(t, err, "hostfwd_add u1 tcp:"+host.String()+"-:22: Could not set up host forwarding rule", "a port in use")

	require.NoError(t, m.HostfwdRemove(ctx, "u0", host))
	_, err = net.DialTimeout("tcp", host.String(), 5*time.Second)
	require.Error(t, err, "the removed forward's host port")
	require.ErrorContains(t, m.HostfwdRemove(ctx, "u0", host), "not found")

	// A guest address of its own (a static one, as the guest's agent may
	// report).
	require.NoError(t, m.HostfwdAdd(ctx, "u0", host, netip.MustParseAddrPort("10.0.2.20:22")))
	out, err := m.HumanMonitorCommand(ctx, "info usernet")
	require.NoError(t, err)
	require.Regexp(t, `TCP\[HOST_FORWARD\]\s+\d+\s+127\.0\.0\.1\s+`+fmt.Sprint(host.Port())+`\s+10\.0\.2\.20\s+22\s`, out)
	require.NoError(t, m.HostfwdRemove(ctx, "u0", host))

	guest := netip.MustParseAddrPort("10.0.2.15:22")
	require.ErrorContains(t, m.HostfwdAdd(ctx, "nosuch", host, guest), "unrecognized netdev id 'nosuch'")
	require.ErrorContains(t, m.HostfwdAdd(ctx, "u0", netip.MustParseAddrPort("[::1]:2222"), guest), "only IPv4")
	require.ErrorContains(t, m.HostfwdAdd(ctx, "u0", host, netip.MustParseAddrPort("[fd00::2]:22")), "only IPv4")
}

func TestUserNetdevPattern(t *testing.T) {
	out := "virtio-net-pci.0: index=0,type=nic,model=virtio-net-pci,macaddr=52:54:00:12:34:56\r\n" +
		" \\ net0: index=0,type=user,net=10.0.2.0,restrict=on\r\n" +
		"virtio-net-pci.1: index=0,type=nic,model=virtio-net-pci,macaddr=52:54:00:12:34:57\r\n" +
		" \\ net1: index=0,type=bridge,helper=/usr/lib/qemu/qemu-bridge-helper,br=br0\r\n" +
		"lonely: index=0,type=user\r\n" +
		" \\ tricky: index=0,type=username\r\n"
	var ids []string
	for _, sub := range userNetdev.FindAllStringSubmatch(out, -1) {
		ids = append(ids, sub[2]+" "+sub[1])
	}
	require.Equal(t, []string{"net0 52:54:00:12:34:56"}, ids)
}
