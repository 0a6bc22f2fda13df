package node

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// runnerDataFull: a VM with UEFI firmware and a TPM whose data volume (the
// runner-data claim: firmware variables, TPM state, machine uuid) is full.
// A first start says what is full and what to do, and starts once room
// is freed; a later start on the full volume runs, warns, and loses none
// of the variables or TPM state that were there.
func runnerDataFull(t *testing.T, ns string) {
	const vm = "keeper"
	disk := ns + "-" + vm
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
		Name: disk, Size: resource.MustParse("48Mi"),
		Labels: map[string]string{"disk": disk}, Content: testguest.Disk(t),
	}))
	// Smaller than other data volumes: the claim, which selects none,
	// binds the smallest that fits.
	data := disk + "-data"
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: data, Size: resource.MustParse("2Mi"), Space: resource.MustParse("1Mi"),
	}))
	dir := node.VolumePath(data)
	ballast := fill(t, node.SpaceDir(data), 0)

	// OVMF does not boot the test guest's disk: it stays in its boot
	// manager, which writes variables and starts the TPM all the same,
	// and ignores the power button.
	manifest := strings.Replace(fmt.Sprintf(guestVM, vm, ns), "    firmware: bios\n", "    firmware: uefi\n    useTpm: true\n", 1)
	manifest = strings.Replace(manifest, "powerdownTimeout: 60", "powerdownTimeout: 2", 1)
	kubectl(t, manifest, "apply", "-f", "-")
	defer deleteVM(t, ns, vm)

	claim := "runner-data-" + vm + "-0"
	kubectl(t, "", "vm", "start", "-n", ns, vm)
	requireEvents(t, ns, "vm/"+vm, "StartFailed", "no space left on device", "claim "+claim+") is full; free room on it or grow its claim")

	// Room: the runner, restarted, starts the VM.
	require.NoError(t, os.Remove(ballast))
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	// The template has no variables; OVMF writes its boot order (qemu
	// writes the file as the firmware writes its flash).
	permall := filepath.Join(dir, "tpm", "tpm2-00.permall")
	bootOrder := utf16([]byte("BootOrder"))
	eventually.Within(t, 3*time.Minute, func() string {
		if _, err := os.Stat(permall); err != nil {
			return err.Error()
		}
		if !bytes.Contains(contents(t, filepath.Join(dir, "fw-vars.fd")), bootOrder) {
			return "OVMF wrote no BootOrder variable yet"
		}
		return ""
	})
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "2m")
	uuid, vars, tpm := contents(t, filepath.Join(dir, "uuid.txt")), contents(t, filepath.Join(dir, "fw-vars.fd")), contents(t, permall)

	// Full again: the VM starts with what it has, and says that the TPM
	// cannot save its state.
	ballast = fill(t, node.SpaceDir(data), 0)
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	requireEvents(t, ns, "vm/"+vm, "DataVolumeFull", "claim "+claim+") has 0 KiB free: the TPM cannot save changes to its state")
	eventually.Within(t, time.Minute, func() string {
		if out := kubectl(t, "", "vm", "status", "-n", ns, vm); !strings.Contains(out, "DataVolumeFull") {
			return "kubectl vm status:\n" + out
		}
		return ""
	})
	// Time for the firmware to use the TPM and write variables.
	time.Sleep(20 * time.Second)
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "2m")
	require.Equal(t, uuid, contents(t, filepath.Join(dir, "uuid.txt")))
	require.Equal(t, tpm, contents(t, permall), "the TPM's state changed on a full volume")
	// The variables are written in place, in blocks the file has.
	vars2 := contents(t, filepath.Join(dir, "fw-vars.fd"))
	require.Len(t, vars2, len(vars))
	require.True(t, bytes.Contains(vars2, bootOrder), "the variables were lost")

	// Room again: the VM starts, its TPM with the state it had.
	require.NoError(t, os.Remove(ballast))
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	eventually.Within(t, 2*time.Minute, func() string {
		if now := contents(t, permall); bytes.Equal(now, tpm) {
			return "the TPM has not saved its state since"
		}
		return ""
	})
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "2m")
}

func contents(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// utf16 is ASCII s as UEFI names variables.
func utf16(s []byte) []byte {
	var b []byte
	for _, c := range s {
		b = append(b, c, 0)
	}
	return b
}
