package node

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrv1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// containerDiskImage builds an image of files, as KubeVirt's containerDisk
// images are made (FROM scratch, the disk owned by 107), and imports it
// into the node's containerd: the node has it without a pull.
func containerDiskImage(t *testing.T, ref string, files ...imagebuild.File) {
	t.Helper()
	dir := t.TempDir()
	epoch := time.Unix(0, 0).UTC()
	layer, err := imagebuild.FilesLayer(dir, files, epoch)
	require.NoError(t, err)
	img, err := imagebuild.Image([]ggcrv1.Layer{layer}, imagebuild.Config{}, epoch)
	require.NoError(t, err)
	tag, err := name.NewTag(ref)
	require.NoError(t, err)
	archive := filepath.Join(dir, "image.tar")
	require.NoError(t, imagebuild.WriteArchive(archive, tag, img))
	require.NoError(t, node.ImportImage(t.Context(), archive))
}

// TestImportContainerDisk is a KubeVirt user's containerDisk image as a
// disk's source, in operator mode: the pod's init containers copy
// vm-runner out of the runner image, run it in the containerDisk image to
// copy its /disk file out, and vm-runner import converts that onto the
// Block claim after checking its checksum; the guest boots from it. A
// restart copies nothing and imports nothing. An image without /disk
// fails the VM with the reason in kubectl vm status.
func TestImportContainerDisk(t *testing.T) {
	const ns, vm, bad = "cdisk", "cd", "nodisk"
	const ref, emptyRef = "vmop.test/containerdisks/testguest:1", "vmop.test/containerdisks/empty:1"
	installVmop(t)
	createNamespace(t, ns)

	qcow2 := filepath.Join(t.TempDir(), "guest.qcow2")
	qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", testguest.Disk(t), qcow2)
	data, err := os.ReadFile(qcow2)
	require.NoError(t, err)
	containerDiskImage(t, ref, imagebuild.File{Path: "disk/guest.qcow2", Mode: 0o440, Data: data, UID: 107, GID: 107})
	containerDiskImage(t, emptyRef, imagebuild.File{Path: "etc/hostname", Mode: 0o644, Data: []byte("empty\n")})
	for _, name := range []string{vm, bad} {
		volume := ns + "-" + name
		require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
			Name: volume, Size: resource.MustParse("80Mi"), Labels: map[string]string{"disk": volume},
		}))
		require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: volume + "-data", Size: resource.MustParse("16Mi")}))
	}

	kubectl(t, fmt.Sprintf(sourcedGuestVM, vm, ns, testnode.StorageClassBlock, "Block", "80Mi", "containerDisk: "+ref, fileSHA256(t, qcow2)), "apply", "-f", "-")
	require.Equal(t, testguest.BootPrefix+"1", waitConsole(t, ns, vm, testguest.BootPrefix, 3*time.Minute))
	require.Contains(t, kubectl(t, "", "logs", "-n", ns, vm+"-0", "-c", "fetch-0"), "Copied the disk out of its image")
	status := kubectl(t, "", "vm", "status", vm, "-n", ns)
	require.Contains(t, status, "disk system-disk: imported "+ref+" (qcow2, ")
	requireEvents(t, ns, "vm/"+vm, "Importing", "Imported")

	t.Run("restart copies nothing", func(t *testing.T) {
		kubectl(t, "", "vm", "restart", vm, "-n", ns, "--wait", "--timeout", "3m")
		require.Equal(t, testguest.BootPrefix+"2", waitConsole(t, ns, vm, testguest.BootPrefix, 2*time.Minute))
		require.Contains(t, kubectl(t, "", "logs", "-n", ns, vm+"-0", "-c", "fetch-0"), "The disk was filled before; nothing to copy")
		require.Contains(t, kubectl(t, "", "logs", "-n", ns, vm+"-0", "-c", "import"), "Imported before; the disk is kept")
	})

	t.Run("not a containerDisk", func(t *testing.T) {
		kubectl(t, fmt.Sprintf(sourcedGuestVM, bad, ns, testnode.StorageClassBlock, "Block", "80Mi", "containerDisk: "+emptyRef, ""), "apply", "-f", "-")
		want := regexp.MustCompile(`Failed\s+True\s+ImportFailed\s+\S+\s+disk system-disk: the image has no /disk directory: not a containerDisk image`)
		var status string
		eventually.Within(t, 3*time.Minute, func() string {
			status = kubectl(t, "", "vm", "status", bad, "-n", ns)
			if !want.MatchString(status) {
				return "no ImportFailed in kubectl vm status:\n" + status
			}
			return ""
		})
		t.Logf("kubectl vm status %s:\n%s", bad, status)
		deleteVM(t, ns, bad)
		requireZeros(t, node.DiskFile(ns+"-"+bad))
	})
	deleteVM(t, ns, vm)
}
