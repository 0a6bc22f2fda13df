package machineid

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/prereq"
)

const oldID = "0123456789abcdef0123456789abcdef\n"

// TestRenew renews the ids of ext4 file systems made by mkfs.ext4 (as a
// guest's installer makes them): on a GPT partition and on a whole disk,
// with D-Bus's id a link and a copy; e2fsck finds them clean after.
func TestRenew(t *testing.T) {
	prereq.Commands(t, "e2fsprogs", "mkfs.ext4", "debugfs", "e2fsck")
	prereq.Commands(t, "fdisk", "sfdisk")
	for _, tc := range []struct {
		name        string
		partitioned bool // else the file system is the whole disk
		dbus        string
		changed     []Changed
	}{
		{"partition, D-Bus id a link", true, "link", []Changed{{2, Files[0]}}},
		{"whole disk, D-Bus id a copy", false, "copy", []Changed{{0, Files[0]}, {0, Files[1]}}},
		{"no id yet", false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
			require.NoError(t, os.MkdirAll(filepath.Join(root, "var/lib/dbus"), 0o755))
			id := ""
			if tc.dbus != "" {
				id = oldID
			}
			require.NoError(t, os.WriteFile(filepath.Join(root, "etc/machine-id"), []byte(id), 0o444))
			switch tc.dbus {
			case "link":
				require.NoError(t, os.Symlink("/etc/machine-id", filepath.Join(root, "var/lib/dbus/machine-id")))
			case "copy":
				require.NoError(t, os.WriteFile(filepath.Join(root, "var/lib/dbus/machine-id"), []byte(oldID), 0o444))
			}
			img := filepath.Join(t.TempDir(), "disk.img")
			fs, offset := img, 0
			if tc.partitioned {
				require.NoError(t, os.WriteFile(img, nil, 0o644))
				require.NoError(t, os.Truncate(img, 64<<20))
				// An EFI system partition first, as a guest has it.
				run(t, "label: gpt\nstart=2048, size=8192, type=U\nstart=10240, type=L\n", "sfdisk", "--quiet", img)
				offset = 10240 * 512
				fs = fmt.Sprintf("%s?offset=%d", img, offset)
			}
			run(t, "", "mkfs.ext4", "-q", "-E", fmt.Sprintf("offset=%d", offset), "-d", root, img, "48M")
			changed, err := Renew(img)
			require.NoError(t, err)
			require.Equal(t, tc.changed, changed)
			got := run(t, "", "debugfs", "-R", "cat /etc/machine-id", fs)
			if tc.dbus == "" {
				require.Empty(t, got)
				return
			}
			require.Regexp(t, `^[0-9a-f]{32}\n$`, got)
			require.NotEqual(t, oldID, got)
			if tc.dbus == "link" {
				require.Contains(t, run(t, "", "debugfs", "-R", "stat /var/lib/dbus/machine-id", fs), `Fast link dest: "/etc/machine-id"`)
			} else {
				require.Equal(t, got, run(t, "", "debugfs", "-R", "cat /var/lib/dbus/machine-id", fs), "D-Bus's id")
			}
			run(t, "", "e2fsck", "-fn", fs)
		})
	}
}

func TestRenewNotADisk(t *testing.T) {
	_, err := Renew(filepath.Join(t.TempDir(), "missing"))
	require.ErrorContains(t, err, "opening disk")
}

func run(t *testing.T, stdin, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %v: %s", name, args, stderr.String())
	return string(out)
}

// FuzzRenew: a clone's disk is the guest's to write, so whatever it
// holds, Renew returns (an error at worst).
func FuzzRenew(f *testing.F) {
	root := f.TempDir()
	img := filepath.Join(root, "seed.img")
	if os.WriteFile(filepath.Join(root, "machine-id"), []byte(oldID), 0o444) == nil &&
		exec.Command("mkfs.ext4", "-q", "-b", "1024", "-N", "16", "-O", "^has_journal", img, "1M").Run() == nil {
		if b, err := os.ReadFile(img); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		disk := filepath.Join(t.TempDir(), "disk.img")
		require.NoError(t, os.WriteFile(disk, b, 0o644))
		done := make(chan struct{})
		go func() { _, _ = Renew(disk); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("hangs")
		}
	})
}
