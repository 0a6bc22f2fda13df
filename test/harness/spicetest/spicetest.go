// Package spicetest checks SPICE passwords against a live server by running
// the link stage of the SPICE protocol for the main channel. It exists so
// tests can verify set_password/expire_password without a SPICE client
// library.
//
// All integers on the wire are little-endian.
package spicetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

const (
	// "REDQ" read as a little-endian uint32.
	magic        = uint32('R') | uint32('E')<<8 | uint32('D')<<16 | uint32('Q')<<24
	versionMajor = 2
	versionMinor = 2

	linkHeaderSize = 16 // magic, major, minor, size
	linkMessSize   = 18 // connection_id u32, channel_type u8, channel_id u8, 3×u32 caps fields
	pubKeySize     = 162
	linkReplySize  = 4 + pubKeySize + 12 // error, pub_key, 3×u32 caps fields

	channelMain = 1

	// Common capability bits.
	capProtocolAuthSelection = 0
	capAuthSpice             = 1

	errOK               = 0
	errPermissionDenied = 7

	// Bound on the reply size so a bogus peer cannot make us allocate much.
	maxReplySize = 4096
)

var linkErrors = map[uint32]string{
	1: "error", 2: "invalid magic", 3: "invalid data", 4: "version mismatch",
	5: "need secured", 6: "need unsecured", 7: "permission denied",
	8: "bad connection id", 9: "channel not available",
}

// LinkError is a non-OK SPICE link error code other than permission denied.
type LinkError uint32

func (e LinkError) Error() string {
	if s, ok := linkErrors[uint32(e)]; ok {
		return fmt.Sprintf("spice link error %d (%s)", uint32(e), s)
	}
	return fmt.Sprintf("spice link error %d", uint32(e))
}

// Login links the main channel of the SPICE server at addr (host:port) with
// password. It returns ok=false and a nil error when the server answers
// "permission denied" (wrong, expired or unset password); any other failure
// is an error. A server with ticketing disabled accepts any password.
func Login(ctx context.Context, addr, password string) (ok bool, err error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	// Unblock pending I/O once ctx is done (not at its deadline, so the
	// error below is reliably ctx.Err()).
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	ok, err = link(conn, password)
	if err != nil && ctx.Err() != nil {
		return false, ctx.Err()
	}
	return ok, err
}

func link(conn io.ReadWriter, password string) (bool, error) {
	le := binary.LittleEndian

	// SpiceLinkHeader + SpiceLinkMess + one common-caps word. Advertising
	// auth selection makes the server wait for an explicit mechanism;
	// without it spice-server falls back to legacy ticketing and warns.
	msg := make([]byte, 0, linkHeaderSize+linkMessSize+4)
	msg = le.AppendUint32(msg, magic)
	msg = le.AppendUint32(msg, versionMajor)
	msg = le.AppendUint32(msg, versionMinor)
	msg = le.AppendUint32(msg, linkMessSize+4)
	msg = le.AppendUint32(msg, 0) // connection_id: 0 = new session
	msg = append(msg, channelMain, 0)
	msg = le.AppendUint32(msg, 1)            // num_common_caps
	msg = le.AppendUint32(msg, 0)            // num_channel_caps
	msg = le.AppendUint32(msg, linkMessSize) // caps_offset, from start of SpiceLinkMess
	msg = le.AppendUint32(msg, 1<<capProtocolAuthSelection|1<<capAuthSpice)
	if _, err := conn.Write(msg); err != nil {
		return false, fmt.Errorf("send link message: %w", err)
	}

	var hdr [linkHeaderSize]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return false, fmt.Errorf("read link header: %w", err)
	}
	if m := le.Uint32(hdr[0:]); m != magic {
		return false, fmt.Errorf("bad magic %#08x in link reply", m)
	}
	if v := le.Uint32(hdr[4:]); v != versionMajor {
		return false, fmt.Errorf("server speaks SPICE major version %d, want %d", v, versionMajor)
	}
	size := le.Uint32(hdr[12:])
	if size < 4 || size > maxReplySize {
		return false, fmt.Errorf("bad link reply size %d", size)
	}
	reply := make([]byte, size)
	if _, err := io.ReadFull(conn, reply); err != nil {
		return false, fmt.Errorf("read link reply: %w", err)
	}
	// Link errors come as a reply whose error field is set.
	if code := le.Uint32(reply); code != errOK {
		return false, LinkError(code)
	}
	if size < linkReplySize {
		return false, fmt.Errorf("short link reply (%d bytes)", size)
	}
	commonCaps, err := replyCommonCaps(reply)
	if err != nil {
		return false, err
	}

	// The key is the DER SubjectPublicKeyInfo of a 1024-bit RSA key, which
	// is exactly 162 bytes.
	pub, err := x509.ParsePKIXPublicKey(reply[4 : 4+pubKeySize])
	if err != nil {
		return false, fmt.Errorf("parse server public key: %w", err)
	}
	rsaPub, isRSA := pub.(*rsa.PublicKey)
	if !isRSA {
		return false, fmt.Errorf("server public key is %T, want RSA", pub)
	}
	// spice-server decrypts with OAEP (OpenSSL's default SHA-1) and compares
	// with strcmp; clients send the trailing NUL, so do the same.
	ticket, err := rsa.EncryptOAEP(sha1.New(), rand.Reader, rsaPub, append([]byte(password), 0), nil)
	if err != nil {
		return false, fmt.Errorf("encrypt password: %w", err)
	}

	var out []byte
	if hasCap(commonCaps, capProtocolAuthSelection) {
		// SpiceLinkAuthMechanism: the mechanism is named by its cap number.
		out = le.AppendUint32(out, capAuthSpice)
	}
	out = append(out, ticket...)
	if _, err := conn.Write(out); err != nil {
		return false, fmt.Errorf("send ticket: %w", err)
	}

	var res [4]byte
	if _, err := io.ReadFull(conn, res[:]); err != nil {
		return false, fmt.Errorf("read link result: %w", err)
	}
	switch code := le.Uint32(res[:]); code {
	case errOK:
		return true, nil
	case errPermissionDenied:
		return false, nil
	default:
		return false, LinkError(code)
	}
}

// replyCommonCaps returns the common-caps words of a SpiceLinkReply.
func replyCommonCaps(reply []byte) ([]uint32, error) {
	le := binary.LittleEndian
	n := le.Uint32(reply[4+pubKeySize:])
	nch := le.Uint32(reply[4+pubKeySize+4:])
	off := le.Uint32(reply[4+pubKeySize+8:])
	// uint64 so peer-chosen counts cannot overflow the check.
	if uint64(off)+4*(uint64(n)+uint64(nch)) > uint64(len(reply)) {
		return nil, errors.New("link reply caps out of range")
	}
	caps := make([]uint32, n)
	for i := range caps {
		caps[i] = le.Uint32(reply[off+4*uint32(i):])
	}
	return caps, nil
}

func hasCap(caps []uint32, bit uint) bool {
	w := bit / 32
	return w < uint(len(caps)) && caps[w]&(1<<(bit%32)) != 0
}
