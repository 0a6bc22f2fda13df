package testguest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vmop/vmop/test/harness/testcache"
)

// Boots, on the kernel command line, makes the guest count its boots on
// its disk (see Disk) and print BootPrefix with the count.
const (
	Boots      = "testguest.boots=1"
	BootPrefix = "TESTGUEST BOOT " // followed by the count, 1 on the first boot
)

// Counter sector of a Disk: past the boot file system, so that a test can
// also read it from the disk's file. init.sh names it by its number, 90112
// (counterOffset / 512).
const (
	diskMiB       = 48
	fsMiB         = 40
	counterOffset = 44 << 20
	counterMagic  = "TESTGUEST-BOOTS "
	diskDepsHint  = "run `make deps` (installs syslinux, mtools and dosfstools)"
)

// Disk returns a raw disk image that firmware (SeaBIOS) boots: a FAT file
// system with syslinux, the guest's kernel and initramfs, booted with
// Boots and the given parameters, and the boot counter at counterOffset.
// It is cached; copy it before a guest writes to it.
func Disk(t testing.TB, params ...string) string {
	t.Helper()
	g := Build(t).WithAppend(append([]string{Boots}, params...)...)
	path, err := disk(g)
	if err != nil {
		t.Fatalf("testguest disk: %v", err)
	}
	return path
}

func disk(g Guest) (string, error) {
	for _, bin := range []string{"syslinux", "mcopy", "mkfs.fat"} {
		if _, err := exec.LookPath(bin); err != nil {
			return "", fmt.Errorf("%s not found: %s", bin, diskDepsHint)
		}
	}
	cfg := "DEFAULT guest\nPROMPT 0\nTIMEOUT 0\nLABEL guest\n  KERNEL vmlinuz\n  INITRD initrd\n  APPEND " + g.Append + "\n"
	h := sha256.New()
	for _, s := range []string{g.BzImage, g.Initrd, cfg} {
		h.Write([]byte(s + "\x00"))
	}
	path := filepath.Join(testcache.Dir(cacheName), "disk-"+hex.EncodeToString(h.Sum(nil)[:8])+".img")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	work, err := os.MkdirTemp(testcache.Dir(cacheName), ".disk-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	img := filepath.Join(work, "disk.img")
	conf := filepath.Join(work, "syslinux.cfg")
	if err := os.WriteFile(conf, []byte(cfg), 0o644); err != nil {
		return "", err
	}
	// A "superfloppy": no partition table, the FAT boot sector with
	// syslinux's code is the disk's first sector.
	steps := [][]string{
		{"mkfs.fat", "-C", "-n", "TESTGUEST", img, fmt.Sprint(fsMiB << 10)},
		{"syslinux", "--install", img},
		{"mcopy", "-i", img, g.BzImage, "::vmlinuz"},
		{"mcopy", "-i", img, g.Initrd, "::initrd"},
		{"mcopy", "-i", img, conf, "::syslinux.cfg"},
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(counterMagic+"0\n"), counterOffset); err != nil {
		return "", err
	}
	if err := f.Truncate(diskMiB << 20); err != nil {
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(img, path)
}

// ReadBoots returns the boot count stored in a disk image file.
func ReadBoots(file string) (int, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b := make([]byte, 64)
	if _, err := f.ReadAt(b, counterOffset); err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var n int
	if _, err := fmt.Sscanf(line, counterMagic+"%d", &n); err != nil {
		return 0, fmt.Errorf("%s: no boot counter at %d: %q", file, counterOffset, line)
	}
	return n, nil
}
