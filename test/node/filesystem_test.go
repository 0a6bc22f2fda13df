package node

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmop/vmop/internal/eventually"
	"github.com/vmop/vmop/internal/testguest"
	"github.com/vmop/vmop/internal/testnode"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// fsDiskVM is the test guest with its disk on a Filesystem claim (as
// local-path and most small clusters' storage classes have only those),
// filled from an image at the first start.
const fsDiskVM = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: %[1]s
  namespace: %[2]s
spec:
  vm:
    state: Running
    maximumRam: 512Mi
    currentRam: 512Mi
    powerdownTimeout: 60
    firmware: bios
    disks:
    - volumeClaimTemplate:
        metadata:
          name: system
        spec:
          storageClassName: %[3]s
          volumeMode: Filesystem
          selector:
            matchLabels:
              disk: %[2]s-%[1]s
          resources:
            requests:
              storage: %[4]d
      source:
        url: %[5]s
        checksum: %[6]s
`

// fsDiskSize is the claim's size: its file is that large, and sparse.
const fsDiskSize = 96 << 20

// TestImportFilesystemClaim is a VM on a storage class without Block
// volumes, in GitOps mode (rendered manifests applied, no operator): its
// disk's claim is a directory of the node; the pod's import init
// container makes disk.img there at the claim's size, sparse, fills it
// from the test guest's disk as qcow2 over http, and qemu boots from it.
// A second start boots the same file again, without an import.
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
	require.NoError(t, os.WriteFile(file, fmt.Appendf(nil, fsDiskVM, vm, ns, testnode.StorageClassFilesystem, fsDiskSize, url, fileSHA256(t, qcow2)), 0o644))
	rendered := kubectl(t, "", "vm", "render", "--service-account", install.RunnerServiceAccount, "-f", file)
	kubectl(t, rendered, "apply", "-f", "-")
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 3*time.Minute))
	require.Equal(t, int64(1), requests.Load(), "GETs of the image")
	require.Contains(t, kubectl(t, "", "logs", "-n", ns, vm+"-0", "-c", "import"), "Imported")

	disk := filepath.Join(node.VolumePath(volume), runnerconfig.DiskFileName)
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

	kubectl(t, rendered, "delete", "-f", "-", "--wait", "--timeout", "3m")
	eventually.Within(t, 2*time.Minute, func() string {
		if _, _, err := kubectlResult(t.Context(), "", "get", "pod", "-n", ns, vm+"-0"); err == nil {
			return "the pod is still there"
		}
		return ""
	})
	boots, err := testguest.ReadBoots(disk)
	require.NoError(t, err)
	require.Equal(t, 2, boots, "the guest's boots, counted on its disk")
}
