// Package debianguest provides the tests' real guest: Debian 12 with
// systemd, cloud-init, qemu-guest-agent, OpenSSH, spice-vdagent and
// tpm2-tools on a raw disk that boots with BIOS and UEFI. The disk is built
// by hack/debian-guest.sh (as root: mmdebstrap, ~4-5 minutes) once per
// machine and kept in the user's cache (test/harness/testcache), keyed by the
// script's hash.
package debianguest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testcache"
)

// rootOffset is where the root file system starts in the image: the
// script's root_start sector.
const rootOffset = 69632 * 512

// CheckFS checks the root file system of a stopped guest's disk as e2fsck
// -n does before a mount: an error means it was not unmounted cleanly
// (still marked in use, a journal to replay) or is damaged.
func CheckFS(disk string) error {
	fs := fmt.Sprintf("%s?offset=%d", disk, rootOffset)
	out, err := exec.Command("dumpe2fs", "-h", fs).Output()
	if err != nil {
		return fmt.Errorf("dumpe2fs: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch {
		case k == "Filesystem state" && v != "clean":
			return fmt.Errorf("the root file system's state is %q, not clean", v)
		case k == "Filesystem features" && strings.Contains(v, "needs_recovery"):
			return errors.New("the root file system's journal needs recovery")
		}
	}
	out, err = exec.Command("e2fsck", "-f", "-n", fs).CombinedOutput()
	if err != nil {
		return fmt.Errorf("e2fsck: %v\n%s", err, out)
	}
	return nil
}

// ReadFile reads a file of a stopped guest's root file system.
func ReadFile(disk, path string) (string, error) {
	var stderr strings.Builder
	cmd := exec.Command("debugfs", "-R", "cat "+path, fmt.Sprintf("%s?offset=%d", disk, rootOffset))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err == nil && strings.Contains(stderr.String(), "File not found") {
		err = fmt.Errorf("%s: not found", path)
	}
	return string(out), err
}

// Image returns the cached disk image, building it first if needed. Tests
// must not write to it: Disk gives each its own copy.
func Image(t testing.TB) string {
	t.Helper()
	prereq.Root(t, "mmdebstrap builds the Debian guest's image")
	prereq.Commands(t, "mmdebstrap, fdisk, e2fsprogs", "mmdebstrap", "sfdisk", "debugfs")
	path, err := image()
	if err != nil {
		t.Fatalf("debian guest: %v", err)
	}
	return path
}

// Disk returns a copy of the image for one test, in dir (sparse: it costs
// what the test writes).
func Disk(t testing.TB, dir string) string {
	t.Helper()
	disk := filepath.Join(dir, "debian.raw")
	out, err := exec.Command("cp", "--sparse=always", Image(t), disk).CombinedOutput()
	if err != nil {
		t.Fatalf("debian guest: copying the image: %v: %s", err, out)
	}
	return disk
}

func image() (string, error) {
	script, err := scriptPath()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(script)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	dir := testcache.Dir("debianguest")
	path := filepath.Join(dir, "debian-guest-"+hex.EncodeToString(sum[:8])+".raw")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	// Test binaries of several packages may want it at once: one builds.
	unlock, err := testcache.Lock(path + ".lock")
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("building the image needs root (mmdebstrap); run the tests as root, as make test does")
	}
	tmp := path + ".tmp"
	cmd := exec.Command(script, tmp)
	log, err := os.Create(path + ".log")
	if err != nil {
		return "", err
	}
	defer log.Close()
	cmd.Stdout, cmd.Stderr = log, log
	start := time.Now()
	fmt.Fprintf(os.Stderr, "debianguest: building %s (a few minutes, once; log in %s)\n", path, log.Name())
	if err := cmd.Run(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("%s failed: %v (log: %s)", script, err, log.Name())
	}
	fmt.Fprintf(os.Stderr, "debianguest: built in %s\n", time.Since(start).Round(time.Second))
	if err := os.Rename(tmp, path); err != nil {
		return "", err
	}
	// Images of earlier versions of the script are 700 MB each.
	old, _ := filepath.Glob(filepath.Join(dir, "debian-guest-*.raw"))
	for _, o := range old {
		if o != path {
			os.Remove(o)
		}
	}
	return path, nil
}

// scriptPath finds hack/debian-guest.sh from the test's directory.
func scriptPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "hack", "debian-guest.sh"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
