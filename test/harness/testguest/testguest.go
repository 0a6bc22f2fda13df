// Package testguest builds a tiny Linux guest for tests that run a real qemu:
// the host's Debian kernel booted directly (-kernel/-initrd) with an
// initramfs holding a static busybox, a few kernel modules and an /init
// script.
//
// The guest prints lines starting with TESTGUEST on the serial console
// (ttyS0): "TESTGUEST CPUS n" whenever its online CPU count changes, then
// "TESTGUEST READY" once booted, and answers a line "ping X" typed on the
// console with "TESTGUEST PONG X". It onlines hot-plugged CPUs; the kernel
// itself offlines and ejects a CPU on device_del. It powers off on the ACPI
// power button (QMP system_powerdown, once READY) unless booted with
// IgnoreACPI on its kernel command line.
//
// Under TCG (qemu 7.2), hot-plug CPUs into the lowest free slots and unplug
// the highest: qemu's emulated APIC stops delivering logical-mode IPIs at
// the first unused APIC ID, so a CPU above a hole is not woken and the
// guest stalls for seconds. query-hotpluggable-cpus lists slots highest
// first. KVM's in-kernel APIC has no such limit.
package testguest

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testcache"
)

// cacheName is the testcache directory of the guest's kernel, initramfs
// and disks.
const cacheName = "testguest"

// Lines the guest prints on its serial console.
const (
	ReadyLine  = "TESTGUEST READY"
	CPUsPrefix = "TESTGUEST CPUS " // followed by the online CPU count
	// PongPrefix, followed by X, answers the line "ping X" typed on the
	// serial console.
	PongPrefix = "TESTGUEST PONG "
	// PanicLine typed on the serial console makes the guest's kernel
	// panic (sysrq c), which it tells qemu through pvpanic.
	PanicLine = "panic"
)

// IgnoreACPI, appended to the kernel command line, makes the guest ignore
// the ACPI power button: system_powerdown then does nothing. CPU hotplug,
// also signalled through ACPI, still works.
const IgnoreACPI = "testguest.ignore_acpi=1"

// Agent, appended to the kernel command line, starts a stand-in for
// qemu-guest-agent on the port org.qemu.guest_agent.0: it answers
// guest-shutdown by powering off, freezes and thaws (FrozenLine), and
// prints AgentLine when it listens.
const Agent = "testguest.agent=1"

// DeafAgent starts the stand-in agent of Agent, which answers
// guest-sync-delimited but does nothing on guest-shutdown, as an agent
// being stopped in the guest may.
const DeafAgent = "testguest.agent=deaf"

// AgentLine is printed once the stand-in agent has opened its port.
const AgentLine = "TESTGUEST AGENT"

// The stand-in agent answers guest-fsfreeze-freeze and -thaw as for one
// file system and prints these lines.
const (
	FrozenLine = "TESTGUEST FROZEN"
	ThawedLine = "TESTGUEST THAWED"
)

// EchoPort is the guest's TCP echo service, on its NIC of qemu's user
// network when the VM has one (at 10.0.2.15/24, where slirp's host
// forwards connect to). The guest prints EchoLine once it listens.
const EchoPort = 7

// DHCP, appended to the kernel command line, makes the guest take its
// first NIC's address, route and MTU from a DHCP server and print DHCPLine
// and the lease, or DHCPLine and "failed".
const DHCP = "testguest.dhcp=1"

// DHCPLine starts the line of DHCP.
const DHCPLine = "TESTGUEST DHCP "

// EchoLine is printed once the echo service listens.
const EchoLine = "TESTGUEST ECHO 7"

// Screen, appended to the kernel command line, paints the guest's display
// (its VGA text console, tty1) white on blue with ScreenLine at the top, and
// answers each line typed there (on the display's keyboard) with KeysPrefix
// and the line on the serial console; Ctrl-Alt-Del there prints
// CtrlAltDelLine, a left click on the display MouseLine.
const Screen = "testguest.screen=1"

// Lines of Screen.
const (
	ScreenLine     = "TESTGUEST SCREEN"
	KeysPrefix     = "TESTGUEST KEYS "
	CtrlAltDelLine = "TESTGUEST CTRL-ALT-DEL"
	MouseLine      = "TESTGUEST MOUSE LEFT"
)

// LockCD returns the kernel parameter that makes the guest hold its CD
// drive open (Linux then locks the tray) and release it after the given
// seconds. The guest prints CDLockedLine and CDReleasedLine. (Debian's
// busybox has no eject: a test opens the tray itself, as a desktop would.)
func LockCD(seconds int) string { return "testguest.lock_cd=" + strconv.Itoa(seconds) }

// Lines of LockCD.
const (
	CDLockedLine   = "TESTGUEST CD LOCKED"
	CDReleasedLine = "TESTGUEST CD RELEASED"
)

// Guest is a kernel and initramfs for qemu's direct kernel boot.
type Guest struct {
	// Kernel is the uncompressed kernel, booted through its PVH entry by
	// qemu's default firmware (SeaBIOS); the bzImage when unpacking failed.
	Kernel string
	Initrd string
	Append string // kernel command line
	// BzImage is the distribution's kernel: slower to boot under TCG, but
	// UEFI firmware (OVMF) can only boot this one.
	BzImage string
}

// QemuArgs are the qemu arguments that boot the guest.
func (g Guest) QemuArgs() []string {
	return []string{"-kernel", g.Kernel, "-initrd", g.Initrd, "-append", g.Append}
}

// WithAppend returns a copy of g with params added to its command line.
func (g Guest) WithAppend(params ...string) Guest {
	g.Append = strings.Join(append([]string{g.Append}, params...), " ")
	return g
}

// defaultAppend: the console is the first serial port; quiet, as every
// line is slow on an emulated UART. panic=-1 reboots at once on a panic
// (also when /init dies), which with qemu -no-reboot ends qemu instead of
// leaving a hung guest. Other knobs (no_timer_check, rcu_expedited,
// mitigations=off, fewer UARTs) measured no faster under TCG; what counts
// is skipping the bzImage decompressor (see pvhKernel).
const defaultAppend = "console=ttyS0 quiet panic=-1"

// modules the guest loads when they are not built in: the ACPI power button,
// its input events (read by acpid) and the virtio devices tests attach.
var modules = []string{
	"button", "evdev",
	"virtio_pci", "virtio_console", "virtio_balloon", "virtio_blk", "virtio_net",
	// The CD drive: q35's AHCI controller and the SCSI CD driver.
	"ahci", "sr_mod",
	// Tells qemu of a panic (PanicLine).
	"pvpanic-mmio",
}

// screenModules are loaded with Screen only, after the others: the mice a
// display client moves, the USB tablet (absolute) and the PS/2 mouse.
var screenModules = []string{"xhci_pci", "usbhid", "hid_generic", "psmouse"}

// applets get a symlink to busybox in /bin.
var applets = []string{
	"sh", "acpid", "cat", "dd", "dmesg", "grep", "insmod", "ls", "lsmod",
	"mkdir", "mount", "poweroff", "ps", "reboot", "sleep", "sync", "umount",
	// The echo service (EchoPort), and its address by DHCP.
	"ip", "nc", "udhcpc",
	// Spoofing (spoof.go).
	"arp", "ping", "ping6",
	// The mouse's packets (Screen).
	"od",
	// Records (records.go).
	"yes", "head", "printf",
}

var (
	//go:embed init.sh
	initScript []byte
	//go:embed poweroff.sh
	poweroffScript []byte
	//go:embed udhcpc.sh
	udhcpcScript []byte
)

// Where Debian's linux-image-amd64 and busybox-static install.
var (
	bootDir    = "/boot"
	modulesDir = "/lib/modules"
	busybox    = "/bin/busybox"
)

const depsHint = "run `make deps` (installs linux-image-amd64 and busybox-static)"

var (
	once      sync.Once
	built     Guest
	buildNote string
	buildErr  error
)

// Build returns the guest, building its initramfs on the first call in the
// test binary; it is cached on disk across runs. A missing kernel or busybox
// fails the test: a skip would hide that the VM tests did not run.
func Build(t testing.TB) Guest {
	t.Helper()
	prereq.Commands(t, "qemu-system-x86", "qemu-system-x86_64")
	once.Do(func() {
		built, buildNote, buildErr = build()
		if buildNote != "" {
			t.Log("testguest: " + buildNote)
		}
	})
	if buildErr != nil {
		t.Fatalf("testguest: %v", buildErr)
	}
	return built
}

func build() (Guest, string, error) {
	kver, bzImage, err := findKernel()
	if err != nil {
		return Guest{}, "", err
	}
	kernel, note := bzImage, ""
	if vmlinux, err := pvhKernel(bzImage, kver); err == nil {
		kernel = vmlinux
	} else {
		note = fmt.Sprintf("booting the bzImage, slow under TCG: %v", err)
	}
	img, err := initramfs(filepath.Join(modulesDir, kver))
	if err != nil {
		return Guest{}, "", err
	}
	// Keyed by content (init script, busybox, modules): a changed script
	// never boots a stale image, and test binaries share one file.
	sum := sha256.Sum256(img)
	path := filepath.Join(testcache.Dir(cacheName), "initramfs-"+kver+"-"+hex.EncodeToString(sum[:8])+".cpio")
	if fi, err := os.Stat(path); err != nil || fi.Size() != int64(len(img)) {
		if err := writeAtomic(path, img); err != nil {
			return Guest{}, "", err
		}
	}
	return Guest{Kernel: kernel, Initrd: path, Append: defaultAppend, BzImage: bzImage}, note, nil
}

// findKernel picks the newest /boot/vmlinuz-* whose modules are installed.
// (The running kernel may be another one, e.g. in a container or microVM.)
func findKernel() (version, path string, err error) {
	paths, _ := filepath.Glob(filepath.Join(bootDir, "vmlinuz-*"))
	for _, p := range paths {
		v := strings.TrimPrefix(filepath.Base(p), "vmlinuz-")
		if _, err := os.Stat(filepath.Join(modulesDir, v, "modules.dep")); err != nil {
			continue
		}
		if version == "" || versionLess(version, v) {
			version, path = v, p
		}
	}
	if version == "" {
		return "", "", fmt.Errorf("no kernel %s/vmlinuz-* with modules in %s: %s", bootDir, modulesDir, depsHint)
	}
	// Some distributions make kernels readable by root only.
	f, err := os.Open(path)
	if err != nil {
		return "", "", fmt.Errorf("kernel: %w", err)
	}
	f.Close()
	return version, path, nil
}

// versionLess compares dotted versions number by number ("6.9" < "6.10").
func versionLess(a, b string) bool {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' })
	}
	as, bs := split(a), split(b)
	for i := 0; i < len(as) && i < len(bs); i++ {
		an, aerr := strconv.Atoi(as[i])
		bn, berr := strconv.Atoi(bs[i])
		switch {
		case aerr == nil && berr == nil && an != bn:
			return an < bn
		case (aerr != nil || berr != nil) && as[i] != bs[i]:
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}

func initramfs(kmods string) ([]byte, error) {
	bb, err := readBusybox()
	if err != nil {
		return nil, err
	}
	mods, err := resolveModules(kmods, modules)
	if err != nil {
		return nil, err
	}
	all, err := resolveModules(kmods, append(slices.Clone(modules), screenModules...))
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	w := newCPIOWriter(&buf)
	for _, d := range []string{"bin", "dev", "etc", "etc/acpi", "etc/acpi/PWRF",
		"lib", "lib/modules", "proc", "root", "sys", "tmp", "var", "var/log", "var/run"} {
		w.Dir(d)
	}
	// The kernel opens /dev/console for /init before devtmpfs is mounted;
	// without this node init has no stdout.
	w.CharDev("dev/console", 0o600, 5, 1)
	w.File("bin/busybox", 0o755, bb)
	for _, a := range applets {
		w.Symlink("bin/"+a, "busybox")
	}
	w.File("init", 0o755, initScript)
	w.File("etc/acpi/PWRF/00000080", 0o755, poweroffScript)
	w.File("etc/udhcpc.sh", 0o755, udhcpcScript)
	// etc/modules is loaded at every boot, etc/modules.screen after it
	// with Screen: all's modules in load order, less the first list's.
	var list, screen strings.Builder
	for _, m := range all {
		data, err := readModule(m.path)
		if err != nil {
			return nil, err
		}
		p := "lib/modules/" + m.name + ".ko"
		w.File(p, 0o644, data)
		if slices.ContainsFunc(mods, func(k kmod) bool { return k.name == m.name }) {
			fmt.Fprintf(&list, "/%s\n", p)
		} else {
			fmt.Fprintf(&screen, "/%s\n", p)
		}
	}
	w.File("etc/modules", 0o644, []byte(list.String()))
	w.File("etc/modules.screen", 0o644, []byte(screen.String()))
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// readBusybox insists on a static binary: the initramfs has no libc.
func readBusybox() ([]byte, error) {
	bb, err := os.ReadFile(busybox)
	if err != nil {
		return nil, fmt.Errorf("busybox: %w: %s", err, depsHint)
	}
	f, err := elf.NewFile(bytes.NewReader(bb))
	if err != nil {
		return nil, fmt.Errorf("busybox %s: %w", busybox, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("busybox %s is dynamically linked: %s", busybox, depsHint)
		}
	}
	return bb, nil
}

type kmod struct{ name, path string }

// resolveModules returns the wanted modules that are not built in, after
// their dependencies from modules.dep, each once, in load order.
func resolveModules(dir string, want []string) ([]kmod, error) {
	dep, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w: %s", err, depsHint)
	}
	builtin, _ := os.ReadFile(filepath.Join(dir, "modules.builtin"))
	isBuiltin := map[string]bool{}
	for _, l := range strings.Fields(string(builtin)) {
		isBuiltin[modName(l)] = true
	}
	paths := map[string]string{}  // name -> path relative to dir
	deps := map[string][]string{} // name -> names
	for _, line := range strings.Split(string(dep), "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		n := modName(mod)
		paths[n] = mod
		for _, d := range strings.Fields(rest) {
			deps[n] = append(deps[n], modName(d))
		}
	}
	var out []kmod
	seen := map[string]bool{}
	var visit func(n string) error
	visit = func(n string) error {
		if seen[n] {
			return nil
		}
		seen[n] = true
		p, ok := paths[n]
		if !ok {
			if isBuiltin[n] {
				return nil
			}
			return fmt.Errorf("kernel module %s not found in %s", n, dir)
		}
		for _, d := range deps[n] {
			if err := visit(d); err != nil {
				return err
			}
		}
		out = append(out, kmod{name: n, path: filepath.Join(dir, p)})
		return nil
	}
	for _, n := range want {
		if err := visit(modName(n)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// modName turns "kernel/drivers/virtio/virtio-pci.ko.xz" into "virtio_pci",
// the name the kernel uses.
func modName(p string) string {
	n := filepath.Base(p)
	if i := strings.Index(n, ".ko"); i >= 0 {
		n = n[:i]
	}
	return strings.ReplaceAll(n, "-", "_")
}

// readModule decompresses modules in user space: busybox insmod passes the
// file to init_module as is, and this kernel has no in-kernel decompression.
func readModule(path string) ([]byte, error) {
	switch {
	case strings.HasSuffix(path, ".ko"):
		return os.ReadFile(path)
	case strings.HasSuffix(path, ".ko.gz"):
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return io.ReadAll(r)
	case strings.HasSuffix(path, ".ko.xz"):
		return decompressWith(path, busybox, "xz", "-dc")
	case strings.HasSuffix(path, ".ko.zst"):
		return decompressWith(path, "zstd", "-dc")
	}
	return nil, fmt.Errorf("kernel module %s: unknown compression", path)
}

func decompressWith(path, prog string, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.Command(prog, append(args, path)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("decompress %s with %s: %w: %s", path, prog, err, stderr.String())
	}
	return out, nil
}

// writeAtomic writes via rename: test binaries of several packages may
// build the same image at once, and qemu must never read a partial file.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return errors.Join(errors.New("testguest: write initramfs"), err)
	}
	return nil
}
