// Package dhcp is a DHCPv4 server (RFC 2131, RFC 2132) for one client:
// vm-runner runs it on a VM's tap device so that the guest's own DHCP
// client configures the address, router and DNS the pod gives the VM,
// with no image-specific network configuration.
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

	"golang.org/x/sys/unix"
)

const (
	serverPort = 67
	clientPort = 68
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
	lease Lease
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
	return &Server{s: s, conn: conn, iface: iface, lease: lease}, nil
}

// Serve answers DHCPDISCOVER with OFFER and DHCPREQUEST with ACK (NAK for
// a request of another address) for the lease's MAC until ctx ends, then
// closes the server and returns nil.
func (srv *Server) Serve(ctx context.Context, log *slog.Logger) error {
	s, conn, iface, lease := srv.s, srv.conn, srv.iface, srv.lease
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	log = log.With("interface", iface, "mac", lease.MAC.String())
	log.Info("Serving DHCP", "addr", lease.Addr, "router", lease.Router)
	buf := make([]byte, 1<<16)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dhcp: %s: %w", iface, err)
		}
		req, err := Parse(buf[:n])
		if err != nil {
			log.Debug("Ignoring a packet that is no DHCP message", "from", from, "error", err)
			continue
		}
		reply := s.handle(req, log)
		if reply == nil {
			continue
		}
		b, err := reply.Marshal()
		if err != nil {
			log.Error("Cannot encode reply", "type", reply.Type(), "error", err)
			continue
		}
		to := replyAddr(req, reply)
		if _, err := conn.WriteToUDPAddrPort(b, to); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Warn("Cannot send reply", "type", reply.Type(), "to", to, "error", err)
			continue
		}
		log.Debug("Sent reply", "type", reply.Type(), "to", to)
	}
}

// listen opens port 67 on iface alone, so that servers on other
// interfaces, or in other network namespaces, can do the same.
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
	conn, err := lc.ListenPacket(ctx, "udp4", fmt.Sprintf("0.0.0.0:%d", serverPort))
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
func replyAddr(req, reply *Message) netip.AddrPort {
	if reply.Type() != Nak && req.CIAddr.IsValid() && !req.CIAddr.IsUnspecified() {
		return netip.AddrPortFrom(req.CIAddr, clientPort)
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{255, 255, 255, 255}), clientPort)
}

// server answers the one client its lease.
type server struct {
	lease                 Lease
	leaseOpts, configOpts Options
}

func newServer(lease Lease) (*server, error) {
	leaseOpts, configOpts, err := lease.options()
	if err != nil {
		return nil, err
	}
	return &server{lease: lease, leaseOpts: leaseOpts, configOpts: configOpts}, nil
}

// handle is the reply to req, nil for none.
func (s *server) handle(req *Message, log *slog.Logger) *Message {
	t := req.Type()
	switch {
	case req.Op != BootRequest:
		log.Debug("Ignoring a message that is no request", "op", req.Op, "type", t)
		return nil
	case !bytes.Equal(req.CHAddr, s.lease.MAC):
		log.Debug("Ignoring another client", "client", req.CHAddr.String(), "type", t)
		return nil
	}
	addr := s.lease.Addr.Addr()
	switch t {
	case Discover:
		log.Info("Offering lease", "addr", s.lease.Addr)
		return s.reply(req, Offer, addr, s.leaseOpts)
	case Request:
		if id, ok := req.addrOption(optServerID); ok && id != s.lease.Router {
			log.Info("Guest chose another DHCP server", "server", id)
			return nil
		}
		want, ok := req.addrOption(optRequestedIP)
		if !ok {
			want = req.CIAddr // renewing or rebinding
		}
		if want != addr {
			log.Info("Refusing a request for another address", "requested", want, "addr", addr)
			nak := s.reply(req, Nak, netip.Addr{}, nil)
			nak.Options[optMessage] = fmt.Appendf(nil, "address is %v", addr)
			return nak
		}
		log.Info("Acknowledging lease", "addr", s.lease.Addr, "duration", s.lease.Duration)
		ack := s.reply(req, Ack, addr, s.leaseOpts)
		ack.CIAddr = req.CIAddr
		return ack
	case Inform:
		log.Info("Answering DHCPINFORM", "client", req.CIAddr)
		ack := s.reply(req, Ack, netip.Addr{}, s.configOpts)
		ack.CIAddr = req.CIAddr
		return ack
	case Release:
		log.Info("Guest released its lease", "addr", req.CIAddr)
		return nil
	case Decline:
		log.Warn("Guest declined its address: another host on the link uses it", "addr", addr)
		return nil
	default:
		log.Debug("Ignoring message", "type", t)
		return nil
	}
}

// reply is a reply of type t to req, with the server identifier, the
// client identifier echoed (RFC 6842) and opts.
func (s *server) reply(req *Message, t MessageType, yiaddr netip.Addr, opts Options) *Message {
	m := &Message{
		Op:     BootReply,
		HType:  req.HType,
		XID:    req.XID,
		Flags:  req.Flags,
		YIAddr: yiaddr,
		GIAddr: req.GIAddr,
		CHAddr: req.CHAddr,
		Options: Options{
			optMessageType: {byte(t)},
			optServerID:    s.lease.Router.AsSlice(),
		},
	}
	maps.Copy(m.Options, opts)
	if id, ok := req.Options[optClientID]; ok {
		m.Options[optClientID] = id
	}
	return m
}
