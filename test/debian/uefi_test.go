package debian_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"image"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/console"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/test/harness/debianguest"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/xscreen"
)

const uefiConfig = `"/Runner":
  dataDir: DIR/data
  runtimeDir: DIR/run
  cloudInit:
    metaData: {local-hostname: deb-uefi}
  vm:
    name: deb-uefi
    accelerator: tcg
    firmware: uefi
    useTpm: true
    powerdownTimeout: 60
    maximumCpus: 1
    currentCpus: 1
    maximumRam: 1Gi
    currentRam: 1Gi
    drives:
    - type: raw
      resource: DISK
    display:
      spice: {port: SPICEPORT}
`

// sealed is the persistent handle of the TPM object the test seals.
const sealed = "0x81010001"

// TestDebianUEFI boots the same disk with OVMF and a TPM (swtpm), looks at
// the display through a SPICE viewer, seals a value in the TPM, and boots
// again to unseal it.
func TestDebianUEFI(t *testing.T) {
	g := newGuest(t)
	g.write(uefiConfig)
	g.start()
	secret := make([]byte, 16)
	_, _ = rand.Read(secret)
	value := hex.EncodeToString(secret)

	t.Run("boots with UEFI and sees a TPM 2.0", func(t *testing.T) {
		g.booted()
		t.Logf("agent info %.1f s after the runner started", time.Since(g.started).Seconds())
		g.sh("test -d /sys/firmware/efi")
		g.sh("test -c /dev/tpm0 && test -c /dev/tpmrm0")
		require.Equal(t, "2", strings.TrimSpace(g.sh("cat /sys/class/tpm/tpm0/tpm_version_major")))
	})

	// spice-vdagentd runs (started with its port), but opens the port only
	// for a desktop session's agent: a text console has none.
	t.Run("SPICE shows the display, with vdagentd in the guest", func(t *testing.T) {
		mon := g.monitor()
		// The journal tells why when it is not.
		g.waitSh(time.Minute, "systemctl is-active spice-vdagentd || { journalctl -b --no-pager -o short-precise -u spice-vdagentd -u spice-vdagentd.socket; ls -l /dev/virtio-ports; }", "active")
		display := xscreen.Start(t)
		// The display is locked: a password through the runner's socket,
		// as kubectl vm console hands it over, and a connection file.
		password := rand.Text()
		require.NoError(t, runner.SetDisplayPassword(t.Context(), g.config, password, "+120"))
		vv := filepath.Join(g.dir, "uefi.vv")
		require.NoError(t, os.WriteFile(vv, fmt.Appendf(nil, "[virt-viewer]\ntype=spice\nhost=127.0.0.1\nport=%d\npassword=%s\n", g.spicePort, password), 0o600))
		viewer := exec.Command(console.Viewer, vv)
		viewer.Env = append(os.Environ(), xscreen.Env(display)...)
		viewer.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, viewer.Start())
		defer func() {
			_ = viewer.Process.Kill()
			_ = viewer.Wait()
		}()
		var img *image.RGBA
		eventually.Within(t, time.Minute, func() string {
			info, err := mon.QuerySpice(t.Context())
			if err != nil {
				return err.Error()
			}
			if !slices.ContainsFunc(info.Channels, func(c qmp.SpiceChannel) bool { return c.ChannelType == qmp.SpiceChannelDisplay }) {
				return "no SPICE display channel connected"
			}
			if img, err = xscreen.Shot(display); err != nil {
				return err.Error()
			}
			if err := xscreen.ShowsGuest(img); err != nil {
				return err.Error()
			}
			return ""
		})
		xscreen.Save(t, img, "debian-uefi.png")
	})

	t.Run("a value sealed in the TPM", func(t *testing.T) {
		g.sh("cd /root && tpm2_createprimary -Q -C o -c primary.ctx && " +
			"printf " + value + " | tpm2_create -Q -C primary.ctx -i - -u seal.pub -r seal.priv && " +
			"tpm2_load -Q -C primary.ctx -u seal.pub -r seal.priv -c seal.ctx && " +
			"tpm2_evictcontrol -Q -C o -c seal.ctx " + sealed)
		require.Equal(t, value, g.sh("tpm2_unseal -c "+sealed))
		took, err := g.stop()
		require.NoError(t, err)
		t.Logf("agent shutdown to runner exit: %.1f s", took.Seconds())
		require.NoError(t, debianguest.CheckFS(g.disk))
		require.FileExists(t, g.dir+"/data/fw-vars.fd", "the VM's UEFI variables are kept")
	})
	if t.Failed() {
		return
	}

	g.start()
	t.Run("is unsealed after a restart", func(t *testing.T) {
		g.booted()
		g.sh("test -d /sys/firmware/efi")
		require.Equal(t, value, g.sh("tpm2_unseal -c "+sealed), "the TPM state persists in the data directory")
		_, err := g.stop()
		require.NoError(t, err)
	})
}
