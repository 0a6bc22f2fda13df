package debian_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/snapshotpush"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/snapshot"
	"github.com/vmop/vmop/test/harness/debianguest"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
)

// sshKey is a public key for cloud-init's users module (the guest only
// stores it).
const sshKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq9nl1TrMvvYwO2ZKQl5Ldgj3Ek/F0E8Nu6k4xOL2Ts vmop-test"

// biosConfig is the VM of TestDebianBIOS; ROUND goes into the user-data's
// runcmd, so that each round has its own user-data and instance-id.
const biosConfig = `"/Runner":
  dataDir: DIR/data
  runtimeDir: DIR/run
  cloudInit:
    metaData: {local-hostname: deb-bios}
    userData:
      users:
      - name: vmop
        shell: /bin/bash
        sudo: ALL=(ALL) NOPASSWD:ALL
        ssh_authorized_keys: [` + sshKey + `]
      runcmd:
      - [sh, -c, "echo ROUND >> /var/lib/vmop-runcmd"]
    networkConfig:
      version: 2
      ethernets:
        nic:
          match: {macaddress: "` + mac + `"}
          addresses: [10.0.2.20/24]
  vm:
    name: deb-bios
    accelerator: tcg
    firmware: bios
    powerdownTimeout: 60
    maximumCpus: 2
    currentCpus: CPUS
    maximumRam: 1Gi
    currentRam: RAM
    drives:
    - type: raw
      resource: DISK
    - type: ide-cd
      file: "CD"
`

func biosVM(round, cpus int, ram, cd string) string {
	return strings.NewReplacer("ROUND", "round "+strconv.Itoa(round), "CPUS", strconv.Itoa(cpus), "RAM", ram, "CD", cd).Replace(biosConfig)
}

// TestDebianBIOS boots the guest with SeaBIOS twice. The first boot checks
// cloud-init, the agent's report, CPUs, RAM and the CD, and ends with a
// shutdown through the agent; the second, with changed user-data, checks
// that cloud-init ran again and nothing was lost, and ends with ACPI.
func TestDebianBIOS(t *testing.T) {
	g := newGuest(t)
	g.write(biosVM(1, 1, "1Gi", ""))
	g.start()

	var s runner.Status
	t.Run("the agent reports the guest", func(t *testing.T) {
		s = g.booted()
		t.Logf("agent info %.1f s after the runner started", time.Since(g.started).Seconds())
		require.Equal(t, "deb-bios", s.Guest.Hostname, "meta-data local-hostname")
		require.Equal(t, "debian", s.Guest.OS.ID)
		require.Equal(t, "12", s.Guest.OS.VersionID)
		require.Contains(t, s.Guest.OS.PrettyName, "Debian GNU/Linux 12")
		require.NotEmpty(t, s.Guest.AgentVersion)
		require.Regexp(t, `"VM running".* qemu=10\.`, g.runnerLog(), "the runner image's qemu runs the guest")
	})

	t.Run("cloud-init applied the seed", func(t *testing.T) {
		g.cloudInitDone()
		t.Logf("cloud-init done %.1f s after the runner started", time.Since(g.started).Seconds())
		var result struct {
			V1 struct {
				Datasource string   `json:"datasource"`
				Errors     []string `json:"errors"`
			} `json:"v1"`
		}
		require.NoError(t, json.Unmarshal([]byte(g.sh("cat /run/cloud-init/result.json")), &result))
		require.Empty(t, result.V1.Errors, "cloud-init's errors")
		require.Contains(t, result.V1.Datasource, "DataSourceNoCloud", "the seed disk is what the guest used")
		require.Equal(t, "deb-bios", strings.TrimSpace(g.sh("hostname")))
		require.Equal(t, "round 1", strings.TrimSpace(g.sh("cat /var/lib/vmop-runcmd")), "runcmd ran once")
		require.Equal(t, sshKey, strings.TrimSpace(g.sh("cat /home/vmop/.ssh/authorized_keys")))
		require.Contains(t, g.sh("getent passwd vmop"), ":/home/vmop:/bin/bash")
		require.Contains(t, g.sh("sudo -l -U vmop"), "NOPASSWD: ALL")
		require.Contains(t, g.console(), "deb-bios login:", "a getty on the serial console")
	})

	t.Run("network-config is honoured", func(t *testing.T) {
		var nic guestagent.Interface
		eventually.Within(t, time.Minute, func() string {
			for _, i := range g.rec.Last().Guest.Interfaces {
				if i.HardwareAddress == mac {
					nic = i
				}
			}
			for _, a := range nic.IPAddresses {
				if a.Address == "10.0.2.20" && a.Prefix == 24 {
					return ""
				}
			}
			return fmt.Sprintf("the agent reports %+v", g.rec.Last().Guest.Interfaces)
		})
		require.Contains(t, g.sh("ip -4 -o addr show dev "+nic.Name), "10.0.2.20/24")
	})

	t.Run("CPUs change live", func(t *testing.T) {
		require.Equal(t, "1", strings.TrimSpace(g.sh("nproc")))
		g.write(biosVM(1, 2, "1Gi", ""))
		g.waitSh(time.Minute, "nproc", "2")
		g.waitStatus(0, 30*time.Second, "2 CPUs", func(s runner.Status) bool { return s.CPUs == 2 })
		from := g.rec.Count()
		g.write(biosVM(1, 1, "1Gi", ""))
		g.waitSh(time.Minute, "nproc", "1")
		g.waitStatus(from, 30*time.Second, "1 CPU", func(s runner.Status) bool { return s.CPUs == 1 })
	})

	t.Run("the balloon changes the guest's RAM", func(t *testing.T) {
		memTotal := func() int {
			out := g.sh("awk '/^MemTotal:/ {print $2}' /proc/meminfo")
			kib, err := strconv.Atoi(strings.TrimSpace(out))
			require.NoError(t, err, out)
			return kib >> 10
		}
		full := memTotal()
		require.Greater(t, full, 900, "MiB with 1Gi")
		g.write(biosVM(1, 1, "512Mi", ""))
		eventually.Within(t, time.Minute, func() string {
			if m := memTotal(); m > 530 {
				return fmt.Sprintf("the guest has %d MiB", m)
			}
			return ""
		})
		g.write(biosVM(1, 1, "1Gi", ""))
		eventually.Within(t, time.Minute, func() string {
			if m := memTotal(); m < full-10 {
				return fmt.Sprintf("the guest has %d MiB, had %d", m, full)
			}
			return ""
		})
	})

	// Mounting locks the tray, so the runner's eject is a request to the
	// guest. Debian's systemd-udevd grants it (cdrom_id --eject-media, by
	// SCSI commands) even while the CD is mounted, and systemd then
	// unmounts it: the runner waits for the guest's answer, which here
	// comes at once. (A guest that keeps the tray locked until it is done:
	// TestGuestLockedTray in pkg/vm-runner/runner.)
	t.Run("a CD inserted live is readable; eject goes through the guest", func(t *testing.T) {
		mon := g.monitor()
		ctx := t.Context()
		noMedium := "dd if=/dev/sr0 of=/dev/null bs=2048 count=1 iflag=direct 2>&1 | grep -q 'No medium found' && echo none"
		medium := func(want string) {
			t.Helper()
			eventually.Within(t, 30*time.Second, func() string {
				file, err := cdMedium(ctx, mon)
				if err != nil {
					return err.Error()
				}
				if file != want {
					return fmt.Sprintf("the drive holds %q, want %q", file, want)
				}
				return ""
			})
		}
		g.waitSh(time.Minute, noMedium, "none")
		g.write(biosVM(1, 1, "1Gi", "ISO"))
		g.waitSh(time.Minute, "mkdir -p /mnt/cd && mount -o ro /dev/sr0 /mnt/cd && cat /mnt/cd/hello.txt", "hello from the CD")
		cd, err := cdDrive(ctx, mon)
		require.NoError(t, err)
		require.True(t, cd.Locked, "the guest locks the tray of a mounted CD")

		g.write(biosVM(1, 1, "1Gi", ""))
		medium("")
		require.Contains(t, g.runnerLog(), "CD change waits for the guest to release the tray", "the mounted CD's tray was locked")
		g.waitSh(30*time.Second, noMedium, "none")
		// systemd stops the mount of a medium that is gone.
		g.waitSh(30*time.Second, "mountpoint -q /mnt/cd || echo unmounted", "unmounted")

		// Again, not mounted: the tray opens at once.
		g.write(biosVM(1, 1, "1Gi", "ISO"))
		medium(g.iso)
		g.waitSh(time.Minute, "mount -o ro /dev/sr0 /mnt/cd && cat /mnt/cd/hello.txt && umount /mnt/cd", "hello from the CD")
		g.write(biosVM(1, 1, "1Gi", ""))
		medium("")
	})

	// SSH through the runner's host forwards is test/node's
	// TestDebianServer: kubectl vm ssh into this guest in a pod, then a
	// clean stop.

	// A snapshot's freeze (vm-runner freeze, as Velero's hooks run it):
	// what the guest wrote is on its disk, its file system consistent,
	// until thawed as asked or at the freeze's timeout.
	t.Run("freeze for a snapshot, thawed", func(t *testing.T) {
		status := func() string {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			c, err := guestagent.Dial(ctx, filepath.Join(g.runtime, "guest-agent.sock"))
			require.NoError(t, err)
			defer c.Close()
			var s string
			require.NoError(t, c.Do(ctx, "guest-fsfreeze-status", nil, &s))
			return s
		}
		// Not synced: the freeze writes it out.
		g.sh("echo before-freeze > /var/lib/vmop-freeze")
		start := time.Now()
		res, err := runner.Freeze(t.Context(), g.config, time.Minute)
		require.NoError(t, err)
		t.Logf("freeze: %d file systems frozen in %.2f s", res.FileSystems, time.Since(start).Seconds())
		require.GreaterOrEqual(t, res.FileSystems, 1)
		require.Equal(t, "frozen", status())
		marker, err := debianguest.ReadFile(g.disk, "/var/lib/vmop-freeze")
		require.NoError(t, err)
		require.Equal(t, "before-freeze\n", marker, "read from the disk while the guest is frozen")
		require.NoError(t, debianguest.CheckFS(g.disk), "the frozen file system, as a snapshot would copy it")
		res, err = runner.Freeze(t.Context(), g.config, 0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, res.FileSystems, 1)
		t.Logf("freeze: thawed %.2f s after the freeze began", time.Since(start).Seconds())
		require.Equal(t, "thawed", status())
		require.Equal(t, "before-freeze", strings.TrimSpace(g.sh("cat /var/lib/vmop-freeze")))

		// Nobody thaws: the runner does, at the timeout.
		_, err = runner.Freeze(t.Context(), g.config, 3*time.Second)
		require.NoError(t, err)
		eventually.Within(t, 30*time.Second, func() string {
			if s := status(); s != "thawed" {
				return "the guest is " + s
			}
			return ""
		})
		require.Contains(t, g.runnerLog(), "the freeze's timeout (3s) ran out")
	})

	// kubectl vm snapshot's copy (vm-runner snapshot push to the
	// snapshot pod's qemu-nbd) with the real agent: the copy holds what
	// the guest wrote before (unsynced), not what it wrote after, and its
	// ext4 is clean.
	t.Run("snapshot pushed while it runs", func(t *testing.T) {
		g.sh("echo before-snapshot > /var/lib/vmop-snapshot")
		disks, err := runner.Disks(t.Context(), g.config)
		require.NoError(t, err)
		require.Len(t, disks, 1)
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		psk := snapshotpush.PSK{Identity: "debian", Key: hex.EncodeToString(key)}
		copyFile := filepath.Join(t.TempDir(), "copy.img")
		port := freeport.Get(t)
		srv := snapshot.Server{Address: "127.0.0.1", PSK: psk, Log: io.Discard,
			Exports: []snapshot.Export{{Name: "root", Path: copyFile, Size: disks[0].Size, Port: port}}}
		stop, served := make(chan struct{}), make(chan error, 1)
		go func() { served <- srv.Serve(t.Context(), stop) }()
		res, err := runner.Push(t.Context(), g.config, snapshotpush.PushRequest{Snapshot: "debian", Host: "127.0.0.1", PSK: psk.String(),
			Exports: []snapshotpush.PushExport{{Disk: disks[0].Name, Export: "root", Port: port}}})
		require.NoError(t, err)
		g.sh("echo after-snapshot > /var/lib/vmop-snapshot && sync")
		close(stop)
		require.NoError(t, <-served)
		t.Logf("snapshot: %d MiB in %.1f s, the guest frozen for %.2f s", res.Bytes>>20, res.Seconds, res.FrozenSeconds)
		require.True(t, res.Consistent, res.Why)
		marker, err := debianguest.ReadFile(copyFile, "/var/lib/vmop-snapshot")
		require.NoError(t, err)
		require.Equal(t, "before-snapshot\n", marker)
		require.NoError(t, debianguest.CheckFS(copyFile), "the snapshot's file system")
	})

	t.Run("stop shuts down through the agent, cleanly", func(t *testing.T) {
		// Not synced: a clean shutdown writes it out.
		g.sh("echo before-stop > /var/lib/vmop-marker")
		took, err := g.stop()
		require.NoError(t, err, "the guest shut down by itself")
		t.Logf("agent shutdown to runner exit: %.1f s", took.Seconds())
		require.Contains(t, g.runnerLog(), "Asked the guest agent to shut down")
		require.NoError(t, debianguest.CheckFS(g.disk))
		marker, err := debianguest.ReadFile(g.disk, "/var/lib/vmop-marker")
		require.NoError(t, err)
		require.Equal(t, "before-stop\n", marker)
	})
	if t.Failed() {
		return
	}

	g.write(biosVM(2, 1, "1Gi", ""))
	g.start()
	t.Run("changed user-data runs cloud-init again", func(t *testing.T) {
		g.booted()
		g.cloudInitDone()
		t.Logf("second boot: cloud-init done %.1f s after the runner started", time.Since(g.started).Seconds())
		require.Equal(t, "round 1\nround 2", strings.TrimSpace(g.sh("cat /var/lib/vmop-runcmd")))
		require.Equal(t, "before-stop", strings.TrimSpace(g.sh("cat /var/lib/vmop-marker")))
		ids := strings.Fields(g.sh("ls /var/lib/cloud/instances"))
		require.Len(t, ids, 2, "an instance per user-data")
	})

	t.Run("the journal shows the first boot's clean shutdown", func(t *testing.T) {
		prev := g.sh("journalctl -b -1 --no-pager -o cat")
		t.Logf("end of the previous boot's journal:\n%s", tail(prev, 8))
		require.Contains(t, prev, "System is powering down")
		require.NotContains(t, g.sh("journalctl -b 0 --no-pager -o cat"), "uncleanly shut down")
	})

	t.Run("stop shuts down through ACPI without an agent", func(t *testing.T) {
		from := g.rec.Count()
		// Later, so that the agent first answers this exec; timers are late
		// by up to a minute unless told otherwise.
		g.sh("systemd-run --on-active=1 --timer-property=AccuracySec=100ms systemctl stop qemu-guest-agent.service")
		g.waitStatus(from, 30*time.Second, "the agent gone", func(s runner.Status) bool { return !s.Booted })
		// The agent's socket no longer answers: the guest has nobody on it.
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := guestagent.Dial(ctx, g.runtime+"/guest-agent.sock")
		require.Error(t, err)
		took, err := g.stop()
		require.NoError(t, err, "the guest shut down by itself")
		t.Logf("ACPI shutdown to runner exit: %.1f s", took.Seconds())
		require.Contains(t, g.runnerLog(), "Sent the ACPI power button")
		require.NotContains(t, g.runnerLog(), "Asked the guest agent")
		require.NoError(t, debianguest.CheckFS(g.disk))
	})
}
