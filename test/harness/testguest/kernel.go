package testguest

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/vmop/vmop/pkg/kvm"

	"github.com/vmop/vmop/test/harness/testcache"
)

// pvhKernel returns the uncompressed kernel (vmlinux) inside bzImage, cached
// on disk. qemu boots it through its PVH entry point, skipping the bzImage
// decompressor: unpacking Debian's xz kernel under TCG takes tens of seconds
// on a loaded machine, a large part of the boot.
func pvhKernel(bzImage, version string) (string, error) {
	bz, err := os.ReadFile(bzImage)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(bz)
	path := filepath.Join(testcache.Dir(cacheName), "vmlinux-"+version+"-"+hex.EncodeToString(sum[:8]))
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	vmlinux, err := unpackBzImage(bz)
	if err != nil {
		return "", err
	}
	if !hasPVHNote(vmlinux) {
		return "", errors.New("vmlinux has no PVH entry point (CONFIG_PVH)")
	}
	return path, writeAtomic(path, vmlinux)
}

// unpackBzImage decompresses the payload of a bzImage as described in the
// kernel's Documentation/arch/x86/boot.rst.
func unpackBzImage(bz []byte) ([]byte, error) {
	if len(bz) < 0x250 || string(bz[0x202:0x206]) != "HdrS" ||
		binary.LittleEndian.Uint16(bz[0x206:]) < 0x208 {
		return nil, errors.New("not a bzImage with payload fields (boot protocol 2.08+)")
	}
	setupSects := int(bz[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects+1)*512 + int(binary.LittleEndian.Uint32(bz[0x248:]))
	end := start + int(binary.LittleEndian.Uint32(bz[0x24c:]))
	if start >= end || end > len(bz) {
		return nil, errors.New("bzImage payload out of bounds")
	}
	p := bz[start:end]
	switch {
	case bytes.HasPrefix(p, []byte{0x1f, 0x8b}):
		r, err := gzip.NewReader(bytes.NewReader(p))
		if err != nil {
			return nil, err
		}
		r.Multistream(false)
		return io.ReadAll(r)
	// xz and zstd payloads end with the 4-byte uncompressed size, which the
	// tools would take for a truncated second stream. Debian's xz kernel
	// uses the x86 BCJ filter, which busybox's xz lacks: xz-utils it is.
	case bytes.HasPrefix(p, []byte{0xfd, '7', 'z', 'X', 'Z', 0}) && len(p) > 4:
		return pipeThrough(p[:len(p)-4], "xz", "-dc")
	case bytes.HasPrefix(p, []byte{0x28, 0xb5, 0x2f, 0xfd}) && len(p) > 4:
		return pipeThrough(p[:len(p)-4], "zstd", "-dc")
	}
	return nil, fmt.Errorf("bzImage payload compression %x not handled", p[:min(len(p), 4)])
}

func pipeThrough(in []byte, prog string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(prog, args...)
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if errors.Is(err, exec.ErrNotFound) {
		return nil, fmt.Errorf("%w (install xz-utils or zstd)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", prog, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return out, nil
}

// hasPVHNote reports whether the ELF kernel has the Xen note
// XEN_ELFNOTE_PHYS32_ENTRY, which qemu needs to boot an ELF kernel.
func hasPVHNote(vmlinux []byte) bool {
	const phys32Entry = 18
	f, err := elf.NewFile(bytes.NewReader(vmlinux))
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			return false
		}
		// Notes: namesz, descsz, type, name and desc padded to 4 bytes.
		for len(b) >= 12 {
			namesz := int(binary.LittleEndian.Uint32(b))
			descsz := int(binary.LittleEndian.Uint32(b[4:]))
			typ := binary.LittleEndian.Uint32(b[8:])
			n := 12 + (namesz+3)&^3 + (descsz+3)&^3
			if n > len(b) || n < 12 {
				break
			}
			if typ == phys32Entry && namesz == 4 && string(b[12:15]) == "Xen" {
				return true
			}
			b = b[n:]
		}
	}
	return false
}

// Accel is the qemu accelerator for test VMs: "kvm:tcg" where KVM is
// backed by hardware virtualization, else "tcg". Some sandboxes offer a
// /dev/kvm from kvm_pvm (paravirtualized nested KVM) that cannot run an
// unmodified guest: firmware crawls and the kernel stops with "KVM internal
// error ... emulation failure", while qemu reports KVM as enabled.
func Accel() string {
	if kvm.Usable() == nil {
		return "kvm:tcg"
	}
	return "tcg"
}
