package node

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// fsDiskSize is the claim's size: its file is that large, and sparse.
const fsDiskSize = 96 << 20

// TestImportFilesystemClaim is a VM on a storage class without Block
// volumes, in GitOps mode (rendered manifests applied, no operator): its
// disk's claim is a directory of the node; the pod's import init
// container makes disk.img there at the claim's size, sparse, fills it
// from the test guest's disk as qcow2 over http, and qemu boots from it.
// A second start boots the same file again, without an import; then
// kubectl vm disk upload --force replaces the file's content; then
// kubectl vm snapshot and restore, in GitOps mode, take it back a boot.
func TestImportFilesystemClaim(t *testing.T) {
	const ns, vm = "fsdisk", "fs"
	createNamespace(t, ns)
	grantRunner(t, ns)
	volume := ns + "-" + vm
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
		Name: volume, Size: *resource.NewQuantity(fsDiskSize, resource.BinarySI), Labels: map[string]string{"disk": volume},
	}))
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: volume + "-data", Size: resource.MustParse("16Mi")}))

	qcow2 := filepath.Join(t.TempDir(), "guest.qcow2")
	qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", testguest.Disk(t), qcow2)
	url, requests := serveFile(t, qcow2)

	file := filepath.Join(t.TempDir(), "vm.yaml")
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, sourcedGuestVM, vm, ns, testnode.StorageClassFilesystem, "Filesystem", strconv.Itoa(fsDiskSize), "url: "+url, fileSHA256(t, qcow2)), 0o644))
	rendered := kubectl(t, "", "vm", "render", "--service-account", install.RunnerServiceAccount, "-f", file)
	kubectl(t, rendered, "apply", "-f", "-")
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 3*time.Minute))
	require.Equal(t, int64(1), requests.Load(), "GETs of the image")
	require.Contains(t, kubectl(t, "", "logs", "-n", ns, vm+"-0", "-c", "import"), "Imported")

	disk := filepath.Join(node.VolumePath(volume), vmpod.DiskFileName)
	fi, err := os.Stat(disk)
	require.NoError(t, err, "the disk's file on the node")
	require.EqualValues(t, fsDiskSize, fi.Size(), "the file has the claim's size")
	allocated := fi.Sys().(*syscall.Stat_t).Blocks * 512
	t.Logf("%s: %d MiB, %d MiB of it allocated", disk, fi.Size()>>20, allocated>>20)
	require.Less(t, allocated, int64(fsDiskSize), "the file is sparse")

	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
	require.Contains(t, kubectl(t, "", "logs", "-n", ns, vm+"-0", "-c", "import"), "Imported before; the disk is kept")
	require.Equal(t, int64(1), requests.Load(), "GETs of the image after the second start")

	// kubectl vm disk upload into the same file: a fresh copy of the
	// guest's disk, gzipped, which --force puts over the guest's data;
	// the guest counts its boots anew.
	kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
	gz := filepath.Join(t.TempDir(), "guest.raw.gz")
	gzipFile(t, testguest.Disk(t), gz)
	out := kubectl(t, "", "vm", "disk", "upload", "-n", ns, vm, "--disk", "system", "--image", gz, "--force")
	t.Logf("kubectl vm disk upload --force into disk.img:\n%s", out)
	got, err := os.ReadFile(disk)
	require.NoError(t, err)
	want, err := os.ReadFile(testguest.Disk(t))
	require.NoError(t, err)
	require.Len(t, got, fsDiskSize, "the file keeps the claim's size")
	require.True(t, bytes.Equal(want, got[:len(want)]), "disk.img starts with the uploaded image")
	require.True(t, bytes.Equal(make([]byte, len(got)-len(want)), got[len(want):]), "zeros after it")
	kubectl(t, "", "vm", "start", "-n", ns, vm, "--wait", "--timeout", "3m")
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
	require.Equal(t, int64(1), requests.Load(), "GETs of the image after the upload")

	// A snapshot in GitOps mode, of a guest without an agent: crash-
	// consistent, and says so. A boot later, the restore brings the
	// counter back: the next boot is the second again.
	for i := range 2 {
		require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{
			Name: fmt.Sprintf("%s-copy-%d", volume, i), Size: *resource.NewQuantity(fsDiskSize, resource.BinarySI),
		}))
	}
	out = kubectl(t, "", "vm", "snapshot", "-n", ns, vm, "--name", "g1")
	require.Regexp(t, `^snapshot g1 of vm fsdisk/fs taken in [0-9.]+s: 1 disk, 96 MiB; crash-consistent: no guest agent is connected`, out)
	kubectl(t, "", "vm", "restart", "-n", ns, vm, "--wait", "--timeout", "3m")
	require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
	out = kubectl(t, "", "vm", "restore", "-n", ns, vm, "g1")
	t.Logf("kubectl vm restore in GitOps mode:\n%s", out)
	require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
	kubectl(t, "", "vm", "snapshot", "delete", "-n", ns, vm, "g1")

	kubectl(t, rendered, "delete", "-f", "-", "--wait", "--timeout", "3m")
	eventually.Within(t, 2*time.Minute, func() string {
		if _, _, err := kubectlResult(t.Context(), "", "get", "pod", "-n", ns, vm+"-0"); err == nil {
			return "the pod is still there"
		}
		return ""
	})
	boots, err := testguest.ReadBoots(disk)
	require.NoError(t, err)
	require.Equal(t, 2, boots, "the guest's boots since the upload, counted on its disk: 1 in the snapshot, and the one after the restore")
}
