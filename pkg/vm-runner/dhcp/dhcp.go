// Package dhcp is a DHCPv4 server (RFC 2131, RFC 2132) for one client:
// vm-runner runs it on a VM's tap device so that the guest's own DHCP
// client configures the address, router and DNS the pod gives the VM,
// with no image-specific network configuration. The messages, the
// guest's and the replies, are github.com/insomniacslk/dhcp's dhcpv4.
package dhcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"golang.org/x/sys/unix"
)

// Lease is what the one guest gets.
type Lease struct {
	MAC      net.HardwareAddr // only this client is answered
	Addr     netip.Prefix     // the guest's address and prefix, e.g. 10.0.2.15/24
	Router   netip.Addr       // also the server identifier (option 54)
	DNS      []netip.Addr     // option 6, may be empty
	Search   []string         // option 119 (RFC 3397 encoding), may be empty
	Domain   string           // option 15, may be empty
	Hostname string           // option 12, may be empty
	MTU      int              // option 26 when > 0
	Duration time.Duration    // lease time (option 51), renewal T1/T2 as usual
}

// Server answers one guest's DHCP requests on one interface.
type Server struct {
	s     *server
	conn  *net.UDPConn
	iface string
}

// Listen checks lease and opens port 67 on iface, so that a caller learns
// of a bad lease or a missing privilege before it goes on.
func Listen(ctx context.Context, iface string, lease Lease) (*Server, error) {
	s, err := newServer(lease)
	if err != nil {
		return nil, err
	}
	conn, err := listen(ctx, iface)
	if err != nil {
		return nil, err
	}
	return &Server{s: s, conn: conn, iface: iface}, nil
}

// Serve answers DHCPDISCOVER with OFFER and DHCPREQUEST with ACK (NAK for
// a request of another address) for the lease's MAC until ctx ends, then
// closes the server and returns nil. It answers one message at a time,
// unlike server4.Server, which starts a goroutine for each datagram: a
// guest flooding the tap queued thousands of them, for fewer answers.
func (srv *Server) Serve(ctx context.Context, log *slog.Logger) error {
	conn, lease := srv.conn, srv.s.lease
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	log = log.With("interface", srv.iface, "mac", lease.MAC.String())
	log.Info("Serving DHCP", "addr", lease.Addr, "router", lease.Router)
	buf := make([]byte, 1<<16)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dhcp: %s: %w", srv.iface, err)
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			log.Debug("Ignoring a packet that is no DHCP message", "from", from, "error", err)
			continue
		}
		srv.s.answer(ctx, conn, req, log)
	}
}

// listen opens port 67 on iface alone, so that servers on other
// interfaces, or in other network namespaces, can do the same. It is not
// server4.NewIPv4UDPConn, which also sets SO_REUSEPORT (another process
// of the pod's user could then take the guest's requests) and drops the
// errno that tells of a missing privilege.
func listen(ctx context.Context, iface string) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if cerr := c.Control(func(fd uintptr) {
			if err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); err != nil {
				err = fmt.Errorf("SO_REUSEADDR: %w", err)
				return
			}
			if err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_BROADCAST, 1); err != nil {
				err = fmt.Errorf("SO_BROADCAST: %w", err)
				return
			}
			if err = unix.BindToDevice(int(fd), iface); err != nil {
				err = fmt.Errorf("SO_BINDTODEVICE: %w", err)
			}
		}); cerr != nil {
			return cerr
		}
		return err
	}}
	conn, err := lc.ListenPacket(ctx, "udp4", fmt.Sprintf("0.0.0.0:%d", dhcpv4.ServerPort))
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("dhcp: %s: %w (needs CAP_NET_BIND_SERVICE and CAP_NET_RAW)", iface, err)
		}
		return nil, fmt.Errorf("dhcp: %s: %w", iface, err)
	}
	return conn.(*net.UDPConn), nil
}

// replyAddr is where a reply goes (RFC 2131 section 4.1): to a client that
// has its address, there; otherwise broadcast, as the client cannot
// receive unicast yet and a UDP socket cannot fill the ARP cache for it.
// A NAK is always broadcast.
func replyAddr(req, reply *dhcpv4.DHCPv4) netip.AddrPort {
	if ciaddr, ok := netip.AddrFromSlice(req.ClientIPAddr.To4()); ok && !ciaddr.IsUnspecified() &&
		reply.MessageType() != dhcpv4.MessageTypeNak {
		return netip.AddrPortFrom(ciaddr, dhcpv4.ClientPort)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), dhcpv4.ClientPort)
}

// server answers the one client its lease.
type server struct {
	lease                 Lease
	addr, router          net.IP
	leaseOpts, configOpts dhcpv4.Options
}

func newServer(lease Lease) (*server, error) {
	leaseOpts, configOpts, err := lease.options()
	if err != nil {
		return nil, err
	}
	return &server{
		lease: lease, addr: lease.Addr.Addr().AsSlice(), router: lease.Router.AsSlice(),
		leaseOpts: leaseOpts, configOpts: configOpts,
	}, nil
}

// answer sends req's reply, if any, on conn.
func (s *server) answer(ctx context.Context, conn *net.UDPConn, req *dhcpv4.DHCPv4, log *slog.Logger) {
	reply := s.handle(req, log)
	if reply == nil {
		return
	}
	t, to := reply.MessageType(), replyAddr(req, reply)
	if _, err := conn.WriteToUDPAddrPort(reply.ToBytes(), to); err != nil {
		if ctx.Err() == nil {
			log.Warn("Cannot send reply", "type", t, "to", to, "error", err)
		}
		return
	}
	log.Debug("Sent reply", "type", t, "to", to)
}

// handle is the reply to req, nil for none.
func (s *server) handle(req *dhcpv4.DHCPv4, log *slog.Logger) *dhcpv4.DHCPv4 {
	t := req.MessageType()
	switch {
	case req.OpCode != dhcpv4.OpcodeBootRequest:
		log.Debug("Ignoring a message that is no request", "op", req.OpCode, "type", t)
		return nil
	case !bytes.Equal(req.ClientHWAddr, s.lease.MAC):
		log.Debug("Ignoring another client", "client", req.ClientHWAddr.String(), "type", t)
		return nil
	}
	switch t {
	case dhcpv4.MessageTypeDiscover:
		log.Info("Offering lease", "addr", s.lease.Addr)
		return s.reply(req, log, dhcpv4.MessageTypeOffer, s.addr, s.leaseOpts)
	case dhcpv4.MessageTypeRequest:
		if id := req.ServerIdentifier(); id != nil && !id.Equal(s.router) {
			log.Info("Guest chose another DHCP server", "server", id)
			return nil
		}
		want := req.RequestedIPAddress()
		if want == nil {
			want = req.ClientIPAddr // renewing or rebinding
		}
		if !want.Equal(s.addr) {
			log.Info("Refusing a request for another address", "requested", want, "addr", s.addr)
			return s.reply(req, log, dhcpv4.MessageTypeNak, nil, nil,
				dhcpv4.WithOption(dhcpv4.OptMessage(fmt.Sprintf("address is %v", s.addr))))
		}
		log.Info("Acknowledging lease", "addr", s.lease.Addr, "duration", s.lease.Duration)
		return s.reply(req, log, dhcpv4.MessageTypeAck, s.addr, s.leaseOpts, dhcpv4.WithClientIP(req.ClientIPAddr))
	case dhcpv4.MessageTypeInform:
		log.Info("Answering DHCPINFORM", "client", req.ClientIPAddr)
		return s.reply(req, log, dhcpv4.MessageTypeAck, nil, s.configOpts, dhcpv4.WithClientIP(req.ClientIPAddr))
	case dhcpv4.MessageTypeRelease:
		log.Info("Guest released its lease", "addr", req.ClientIPAddr)
		return nil
	case dhcpv4.MessageTypeDecline:
		log.Warn("Guest declined its address: another host on the link uses it", "addr", s.addr)
		return nil
	default:
		log.Debug("Ignoring message", "type", t)
		return nil
	}
}

// reply is a reply of type t to req with the server identifier, opts and
// what dhcpv4 copies from a request (the client identifier, RFC 6842).
func (s *server) reply(req *dhcpv4.DHCPv4, log *slog.Logger, t dhcpv4.MessageType, yiaddr net.IP, opts dhcpv4.Options, more ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	m, err := dhcpv4.NewReplyFromRequest(req, append(more,
		dhcpv4.WithMessageType(t),
		dhcpv4.WithYourIP(yiaddr),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(s.router)))...)
	if err != nil { // it draws a transaction ID, which WithReply then replaces
		log.Error("Cannot build reply", "type", t, "error", err)
		return nil
	}
	maps.Copy(m.Options, opts)
	return m
}
