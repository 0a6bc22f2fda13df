package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
)

// A guest's TCP port is reached from the runner's network namespace (in
// a cluster, the pod's): on a pod network at the guest's address behind
// the pod; else through a host forward of qemu's user network,
// which exists only while a connection needs it, or, for a guest without
// user networking (tap), at the address its guest agent reports.

// forwardRelease bounds removing a host forward, which happens after the
// request that held it has ended.
const forwardRelease = 5 * time.Second

// hostForwarder adds and removes the host forwards of a user-mode netdev
// (qemu over QMP; a fake in unit tests).
type hostForwarder interface {
	HostfwdAdd(ctx context.Context, netdev string, host, guest netip.AddrPort) error
	HostfwdRemove(ctx context.Context, netdev string, host netip.AddrPort) error
}

// forwards are the host forwards in use, one per guest address and port,
// shared by all connections to it and removed with the last of them, so
// that the guest is not reachable on the pod's loopback longer than
// needed.
type forwards struct {
	mu      sync.Mutex
	byGuest map[netip.AddrPort]*forward
}

// forward is a host forward and the number of connections using it.
type forward struct {
	netdev string
	host   netip.AddrPort
	users  int
}

// acquire returns where guest (an address without one: the first that
// the network's DHCP server hands out) is reached through netdev, adding
// a host forward unless one exists, and the function that gives it back.
func (f *forwards) acquire(ctx context.Context, fw hostForwarder, log *slog.Logger, netdev string, guest netip.AddrPort) (netip.AddrPort, func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fwd := f.byGuest[guest]
	if fwd == nil {
		host, err := addForward(ctx, fw, netdev, guest)
		if err != nil {
			return netip.AddrPort{}, nil, err
		}
		log.Info("Guest port forwarded", "netdev", netdev, "guest", guestString(guest), "host", host)
		fwd = &forward{netdev: netdev, host: host}
		if f.byGuest == nil {
			f.byGuest = map[netip.AddrPort]*forward{}
		}
		f.byGuest[guest] = fwd
	}
	fwd.users++
	var once sync.Once
	release := func() { once.Do(func() { f.release(fw, log, guest, fwd) }) }
	return fwd.host, release, nil
}

func (f *forwards) release(fw hostForwarder, log *slog.Logger, guest netip.AddrPort, fwd *forward) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fwd.users--; fwd.users > 0 {
		return
	}
	delete(f.byGuest, guest)
	ctx, cancel := context.WithTimeout(context.Background(), forwardRelease)
	defer cancel()
	if err := fw.HostfwdRemove(ctx, fwd.netdev, fwd.host); err != nil {
		// qemu may have ended with the VM: its forwards went with it.
		log.Debug("Removing a guest port forward", "guest", guestString(guest), "host", fwd.host, "err", err)
		return
	}
	log.Info("Guest port forward removed", "netdev", fwd.netdev, "guest", guestString(guest), "host", fwd.host)
}

// guestString is guest for logs and errors: ":PORT" without an address.
func guestString(guest netip.AddrPort) string {
	if !guest.Addr().IsValid() {
		return ":" + strconv.Itoa(int(guest.Port()))
	}
	return guest.String()
}

// forwardAttempts: the free port that addForward picks may be taken by
// another process before qemu binds it.
const forwardAttempts = 3

// addForward forwards a free port of 127.0.0.1 to guest. qemu would pick
// a free port itself for port 0, but tells which only in the table of
// "info usernet", which is for people.
func addForward(ctx context.Context, fw hostForwarder, netdev string, guest netip.AddrPort) (netip.AddrPort, error) {
	var err error
	for range forwardAttempts {
		var host netip.AddrPort
		if host, err = freeLoopbackPort(); err != nil {
			return netip.AddrPort{}, err
		}
		if err = fw.HostfwdAdd(ctx, netdev, host, guest); err == nil {
			return host, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return netip.AddrPort{}, fmt.Errorf("cannot forward to guest port %d: %w", guest.Port(), err)
}

func freeLoopbackPort() (netip.AddrPort, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return netip.AddrPort{}, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).AddrPort(), nil
}

// guestAddress is the address that the guest agent reported first among
// the guest's global unicast ones (IPv4 before IPv6) on the interface with
// MAC address mac, or on any when mac is empty: what a guest on a tap
// network is reached at, and a guest that chose its own address on a
// user network.
func guestAddress(info *guestagent.Info, mac string) (netip.Addr, bool) {
	if info == nil {
		return netip.Addr{}, false
	}
	var v6 netip.Addr
	for _, i := range info.Interfaces {
		if mac != "" && !strings.EqualFold(i.HardwareAddress, mac) {
			continue
		}
		for _, a := range i.IPAddresses {
			ip, err := netip.ParseAddr(a.Address)
			if err != nil || !ip.IsGlobalUnicast() {
				continue
			}
			if ip.Is4() {
				return ip, true
			}
			if !v6.IsValid() {
				v6 = ip
			}
		}
	}
	return v6, v6.IsValid()
}

// setGuest notes what the guest agent told (nothing: a zero info), for
// the status and for connections.
func (r *Runner) setGuest(info guestagent.Info) {
	r.status.Guest = info
	if len(info.Interfaces) == 0 {
		r.guestInfo.Store(nil)
		return
	}
	r.guestInfo.Store(&info)
}

// errNoAddress: a guest without user networking is reached at the
// address its agent reports, and none has come.
var errNoAddress = errors.New("the guest has no user-mode network and its guest agent has reported no address yet (is qemu-guest-agent running in the guest, and has the guest's network come up?)")

// reach returns where guest port guestPort is reached from the runner's
// network namespace, and what gives that up.
func (r *Runner) reach(ctx context.Context, guestPort int) (netip.AddrPort, func(), error) {
	info := r.guestInfo.Load()
	if pn := r.podNet; pn != nil {
		// The address the runner's DHCP server gave, unless the guest
		// reports another one on that NIC.
		ip := pn.Guest.Addr()
		if a, ok := guestAddress(info, r.podMAC); ok && a.Is4() {
			ip = a
		}
		return netip.AddrPortFrom(ip, uint16(guestPort)), func() {}, nil
	}
	netdevs, err := r.mon.UserNetdevs(ctx)
	if err != nil {
		return netip.AddrPort{}, nil, fmt.Errorf("asking qemu for its networks: %w", err)
	}
	if len(netdevs) > 0 {
		// The guest's address on that network when its agent reports an
		// IPv4 one (it may have set its own), else the one slirp's DHCP
		// server gives.
		guest := netip.AddrPortFrom(netip.Addr{}, uint16(guestPort))
		if ip, ok := guestAddress(info, netdevs[0].MAC); ok && ip.Is4() {
			guest = netip.AddrPortFrom(ip, uint16(guestPort))
		}
		return r.forwards.acquire(ctx, r.mon, r.log, netdevs[0].ID, guest)
	}
	ip, ok := guestAddress(info, "")
	if !ok {
		return netip.AddrPort{}, nil, errNoAddress
	}
	return netip.AddrPortFrom(ip, uint16(guestPort)), func() {}, nil
}

// serveConnect answers POST /connect?port=N (vm-runner connect) with the
// address at which TCP port N of the guest is reached, as one line, and
// keeps what it set up for it until the client ends the request.
func (r *Runner) serveConnect(w http.ResponseWriter, req *http.Request) {
	port, err := strconv.Atoi(req.URL.Query().Get("port"))
	if err != nil || port < 1 || port > 65535 {
		http.Error(w, fmt.Sprintf("port %q: must be a number from 1 to 65535", req.URL.Query().Get("port")), http.StatusBadRequest)
		return
	}
	if !r.ready.Load() {
		http.Error(w, "the VM is not running", http.StatusServiceUnavailable)
		return
	}
	addr, release, err := r.reach(req.Context(), port)
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer release()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, addr)
	if err := http.NewResponseController(w).Flush(); err != nil {
		return
	}
	// The client's end of the connection closes when it is done, and the
	// server's when the runner stops.
	<-req.Context().Done()
}
