package dhcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
)

// The op field: a client's request or a server's reply.
const (
	BootRequest = 1
	BootReply   = 2
)

// MessageType is option 53, which makes a BOOTP message a DHCP one.
type MessageType uint8

// The message types of RFC 2132 section 9.6.
const (
	Discover MessageType = 1
	Offer    MessageType = 2
	Request  MessageType = 3
	Decline  MessageType = 4
	Ack      MessageType = 5
	Nak      MessageType = 6
	Release  MessageType = 7
	Inform   MessageType = 8
)

var messageTypeNames = [...]string{
	Discover: "DHCPDISCOVER",
	Offer:    "DHCPOFFER",
	Request:  "DHCPREQUEST",
	Decline:  "DHCPDECLINE",
	Ack:      "DHCPACK",
	Nak:      "DHCPNAK",
	Release:  "DHCPRELEASE",
	Inform:   "DHCPINFORM",
}

func (t MessageType) String() string {
	if int(t) < len(messageTypeNames) && messageTypeNames[t] != "" {
		return messageTypeNames[t]
	}
	return fmt.Sprintf("message type %d", uint8(t))
}

// Layout of the fixed part (RFC 2131 section 2), then the options.
const (
	offCIAddr  = 12
	offCHAddr  = 28
	offSName   = 44
	offFile    = 108
	offCookie  = 236
	offOptions = 240
	chaddrLen  = 16
	// minMessageLen is BOOTP's message size, which some clients still
	// expect (RFC 1542 section 2.1).
	minMessageLen = 300
)

var magicCookie = []byte{99, 130, 83, 99}

// Message is a DHCP message. The sname and file fields are not kept: they
// are only read when option 52 overloads them with more options.
type Message struct {
	Op    uint8 // BootRequest or BootReply
	HType uint8 // hardware type, 1 for Ethernet
	Hops  uint8
	XID   uint32
	Secs  uint16
	Flags uint16
	// The addresses are always IPv4 after Parse (0.0.0.0 when unset);
	// Marshal writes the zero Addr as 0.0.0.0.
	CIAddr, YIAddr, SIAddr, GIAddr netip.Addr
	CHAddr                         net.HardwareAddr // at most 16 bytes; hlen is its length
	Options                        Options
}

// Options are a message's options by code, each value the concatenation of
// all instances of its code (RFC 3396), without pad and end.
type Options map[uint8][]byte

// Type is the message's DHCP type, 0 when it has none (plain BOOTP).
func (m *Message) Type() MessageType {
	if v := m.Options[optMessageType]; len(v) == 1 {
		return MessageType(v[0])
	}
	return 0
}

// addrOption is an option holding one IPv4 address, such as 50 or 54.
func (m *Message) addrOption(code uint8) (netip.Addr, bool) {
	v := m.Options[code]
	if len(v) != 4 {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4([4]byte(v)), true
}

// Parse decodes a DHCP message. It returns an error, never panics, for any
// input that is not one.
func Parse(b []byte) (*Message, error) {
	if len(b) < offOptions {
		return nil, fmt.Errorf("dhcp: message of %d bytes, the fixed part alone is %d", len(b), offOptions)
	}
	if !bytes.Equal(b[offCookie:offOptions], magicCookie) {
		return nil, fmt.Errorf("dhcp: magic cookie %v, not %v", b[offCookie:offOptions], magicCookie)
	}
	hlen := int(b[2])
	if hlen > chaddrLen {
		return nil, fmt.Errorf("dhcp: hardware address length %d, more than %d", hlen, chaddrLen)
	}
	addr := func(off int) netip.Addr { return netip.AddrFrom4([4]byte(b[off : off+4])) }
	m := &Message{
		Op:      b[0],
		HType:   b[1],
		Hops:    b[3],
		XID:     binary.BigEndian.Uint32(b[4:]),
		Secs:    binary.BigEndian.Uint16(b[8:]),
		Flags:   binary.BigEndian.Uint16(b[10:]),
		CIAddr:  addr(offCIAddr),
		YIAddr:  addr(offCIAddr + 4),
		SIAddr:  addr(offCIAddr + 8),
		GIAddr:  addr(offCIAddr + 12),
		CHAddr:  bytes.Clone(b[offCHAddr : offCHAddr+hlen]),
		Options: Options{},
	}
	if err := m.Options.decode(b[offOptions:], "options"); err != nil {
		return nil, err
	}
	overload, ok := m.Options[optOverload]
	if !ok {
		return m, nil
	}
	// Option 52 (RFC 2132 section 9.3): file, then sname, hold options too.
	delete(m.Options, optOverload)
	if len(overload) != 1 || overload[0] < 1 || overload[0] > 3 {
		return nil, fmt.Errorf("dhcp: option overload %v, not one byte 1, 2 or 3", overload)
	}
	if overload[0]&1 != 0 {
		if err := m.Options.decode(b[offFile:offCookie], "file"); err != nil {
			return nil, err
		}
	}
	if overload[0]&2 != 0 {
		if err := m.Options.decode(b[offSName:offFile], "sname"); err != nil {
			return nil, err
		}
	}
	delete(m.Options, optOverload)
	return m, nil
}

// decode adds the options in b, which ends at option 255 or b's end, to o.
func (o Options) decode(b []byte, field string) error {
	for len(b) > 0 {
		code := b[0]
		if code == optPad {
			b = b[1:]
			continue
		}
		if code == optEnd {
			return nil
		}
		if len(b) < 2 || len(b) < 2+int(b[1]) {
			return fmt.Errorf("dhcp: %s: option %d truncated", field, code)
		}
		n := int(b[1])
		if _, ok := o[code]; !ok {
			o[code] = []byte{}
		}
		o[code] = append(o[code], b[2:2+n]...)
		b = b[2+n:]
	}
	return nil
}

// Marshal encodes m. Options longer than 255 bytes are split (RFC 3396);
// the message type comes first, then the options by code.
func (m *Message) Marshal() ([]byte, error) {
	if len(m.CHAddr) > chaddrLen {
		return nil, fmt.Errorf("dhcp: hardware address %v longer than %d bytes", m.CHAddr, chaddrLen)
	}
	b := make([]byte, offOptions, minMessageLen)
	b[0], b[1], b[2], b[3] = m.Op, m.HType, uint8(len(m.CHAddr)), m.Hops
	binary.BigEndian.PutUint32(b[4:], m.XID)
	binary.BigEndian.PutUint16(b[8:], m.Secs)
	binary.BigEndian.PutUint16(b[10:], m.Flags)
	for i, f := range []struct {
		name string
		addr netip.Addr
	}{{"ciaddr", m.CIAddr}, {"yiaddr", m.YIAddr}, {"siaddr", m.SIAddr}, {"giaddr", m.GIAddr}} {
		switch {
		case f.addr.Is4():
			a := f.addr.As4()
			copy(b[offCIAddr+4*i:], a[:])
		case f.addr.IsValid():
			return nil, fmt.Errorf("dhcp: %s %v is not an IPv4 address", f.name, f.addr)
		}
	}
	copy(b[offCHAddr:], m.CHAddr)
	copy(b[offCookie:], magicCookie)

	codes := slices.Sorted(maps.Keys(m.Options))
	if i := slices.Index(codes, optMessageType); i > 0 {
		codes = slices.Insert(slices.Delete(codes, i, i+1), 0, optMessageType)
	}
	for _, code := range codes {
		if code == optPad || code == optEnd {
			return nil, fmt.Errorf("dhcp: option %d cannot carry a value", code)
		}
		v := m.Options[code]
		for {
			n := min(len(v), 255)
			b = append(b, code, uint8(n))
			b = append(b, v[:n]...)
			v = v[n:]
			if len(v) == 0 {
				break
			}
		}
	}
	b = append(b, optEnd)
	if len(b) < minMessageLen {
		b = append(b, make([]byte, minMessageLen-len(b))...)
	}
	return b, nil
}
