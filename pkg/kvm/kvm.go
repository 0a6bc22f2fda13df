// Package kvm tells whether this host's KVM can run an unmodified guest.
// vm-runner asks it before giving qemu "-accel kvm"; the tests ask it to
// know which accelerator their guests get.
package kvm

import (
	"errors"
	"os"
	"path/filepath"
)

// Usable returns nil when qemu can use KVM here: /dev/kvm opens and is
// backed by the CPU's virtualization (kvm_intel or kvm_amd). Otherwise it
// says why not. Paravirtual nested KVM (kvm_pvm) also offers /dev/kvm,
// and qemu reports KVM as enabled, but an unmodified guest stops there
// ("KVM internal error ... emulation failure", or a kernel that spins
// after "Probing EDD").
func Usable() error { return usable("/") }

// usable is Usable on the file system under root.
func usable(root string) error {
	f, err := os.OpenFile(filepath.Join(root, "dev/kvm"), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	f.Close()
	module := func(m string) bool {
		_, err := os.Stat(filepath.Join(root, "sys/module", m))
		return err == nil
	}
	switch {
	case module("kvm_intel"), module("kvm_amd"):
		return nil
	case module("kvm_pvm"):
		return errors.New("/dev/kvm is paravirtual nested KVM (kvm_pvm), which cannot run an unmodified guest")
	}
	return errors.New("/dev/kvm is not backed by kvm_intel or kvm_amd")
}
