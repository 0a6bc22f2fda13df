package podnet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// createTap makes the persistent tap device name (qemu opens it by name),
// owned by uid owner (and its group) unless 0; configure brings it up. A
// tap that a previous runner of the pod made is taken over.
func createTap(name string, owner int) error {
	f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("opening /dev/net/tun: %w (needs the tun device: the node agent, or a privileged runner)", err)
	}
	defer f.Close()
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	// No packet information header: qemu's tap backend expects none; it
	// sets IFF_VNET_HDR itself when it opens the device.
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(int(f.Fd()), unix.TUNSETIFF, ifr); err != nil {
		return tapError("creating the tap device "+name, err)
	}
	if owner != 0 {
		// An owned tap opens for its owner without NET_ADMIN.
		if err := unix.IoctlSetInt(int(f.Fd()), unix.TUNSETOWNER, owner); err != nil {
			return tapError("giving the tap device "+name+" to the runner", err)
		}
		if err := unix.IoctlSetInt(int(f.Fd()), unix.TUNSETGROUP, owner); err != nil {
			return tapError("giving the tap device "+name+" to the runner's group", err)
		}
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.TUNSETPERSIST, 1); err != nil {
		return tapError("keeping the tap device "+name, err)
	}
	return nil
}

// configure sets the address, MTU and up flag of interface name through
// the classic ioctls, which need no netlink library.
func configure(name string, mtu int, addr netip.Addr, bits int) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	set := func(what string, req uint, fill func(*unix.Ifreq) error) error {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		if err := fill(ifr); err != nil {
			return err
		}
		if err := unix.IoctlIfreq(s, req, ifr); err != nil {
			return tapError(fmt.Sprintf("setting the %s of %s", what, name), err)
		}
		return nil
	}
	a4 := addr.As4()
	maskBytes := net4Mask(bits)
	steps := []struct {
		what string
		req  uint
		fill func(*unix.Ifreq) error
	}{
		{"address", unix.SIOCSIFADDR, func(r *unix.Ifreq) error { return r.SetInet4Addr(a4[:]) }},
		{"netmask", unix.SIOCSIFNETMASK, func(r *unix.Ifreq) error { return r.SetInet4Addr(maskBytes) }},
		{"MTU", unix.SIOCSIFMTU, func(r *unix.Ifreq) error { r.SetUint32(uint32(mtu)); return nil }},
	}
	for _, st := range steps {
		if err := set(st.what, st.req, st.fill); err != nil {
			return err
		}
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return tapError("reading the flags of "+name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return tapError("bringing up "+name, err)
	}
	return nil
}

// tapError says what a missing privilege means.
func tapError(what string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: %w (needs NET_ADMIN in the pod's network namespace: the node agent, or a privileged runner)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
