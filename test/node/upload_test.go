package node

import (
	"bytes"
	"compress/gzip"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testnode"
)

// uploadDiskSize is the VM's disk: a size no other test's volume has, so
// that its claim binds the volume made here.
const uploadDiskSize = 100 << 20

// TestImportUpload is a user's upload of a local image into the disk of a
// new, stopped VM, with the rights of the vm-user role alone: kubectl vm
// disk upload creates the disk's claim (the VM never ran), runs its
// uploader pod on the node and streams a qcow2 image through pods/exec to
// the receiver, which converts it onto the Block volume; the volume's
// bytes on the node are the image's as raw. A second upload is refused
// without --force and leaves the disk as it is; with --force a gzipped
// raw image replaces it.
func TestImportUpload(t *testing.T) {
	const ns, vm = "upload", "up"
	installVmop(t)
	createNamespace(t, ns)
	kubectl(t, "", "create", "serviceaccount", "-n", ns, "alice")
	kubectl(t, "", "create", "rolebinding", "alice", "-n", ns, "--clusterrole", install.UserClusterRole, "--serviceaccount", ns+":alice")
	alice := []string{"vm", "--as", "system:serviceaccount:" + ns + ":alice", "-n", ns}

	volume := ns + "-" + vm
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{Name: volume, Size: *resource.NewQuantity(uploadDiskSize, resource.BinarySI)}))
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: volume + "-data", Size: resource.MustParse("16Mi")}))
	kubectl(t, "", append(alice, "create", vm, "--cpus", "1", "--ram", "256Mi", "--disk", "100Mi,"+testnode.StorageClassBlock)...)
	eventually.Within(t, time.Minute, func() string {
		if _, err := node.Client.AppsV1().StatefulSets(ns).Get(t.Context(), vm, metav1.GetOptions{}); err != nil {
			return "the operator has not rendered the VM: " + err.Error()
		}
		return ""
	})

	dir := t.TempDir()
	raw := filepath.Join(dir, "image.raw")
	writeTestImage(t, raw, 64<<20, 1)
	qcow2 := filepath.Join(dir, "image.qcow2")
	qemuImg(t, "convert", "-f", "raw", "-O", "qcow2", raw, qcow2)
	fi, err := os.Stat(qcow2)
	require.NoError(t, err)
	// What the disk must hold: the image as qemu-img makes it raw.
	want := filepath.Join(dir, "want.raw")
	qemuImg(t, "convert", "-f", "qcow2", "-O", "raw", qcow2, want)

	upload := func(image string, more ...string) (string, string, error) {
		return kubectlResult(t.Context(), "", append(alice, append([]string{"disk", "upload", vm, "--disk", "system", "--image", image}, more...)...)...)
	}
	start := time.Now()
	out, errOut, err := upload(qcow2)
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	elapsed := time.Since(start)
	t.Logf("kubectl vm disk upload of a %.1f MiB qcow2 (64 MiB virtual) in %.1f s, the pod's start and deletion included:\n%s%s",
		float64(fi.Size())/(1<<20), elapsed.Seconds(), errOut, out)
	require.Contains(t, out, "disk system-disk of vm upload/up (claim system-disk-up-0): image.qcow2 uploaded in ")
	require.Contains(t, errOut, "persistentvolumeclaim/system-disk-up-0 created")
	requireDiskHolds(t, volume, want)
	_, err = node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-disk-upload", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the uploader pod is gone: %v", err)

	// Another image, which must not reach the disk without --force.
	other := filepath.Join(dir, "other.raw")
	writeTestImage(t, other, 64<<20, 2)
	gz := filepath.Join(dir, "other.raw.gz")
	gzipFile(t, other, gz)
	out, errOut, err = upload(gz)
	require.Error(t, err, "stdout: %s", out)
	require.Contains(t, errOut, "vm upload/up (claim system-disk-up-0): disk system-disk holds data (filled from upload:image.qcow2 at ")
	require.Contains(t, errOut, "--force overwrites it")
	requireDiskHolds(t, volume, want)

	out, errOut, err = upload(gz, "--force")
	require.NoError(t, err, "stdout: %s\nstderr: %s", out, errOut)
	t.Logf("kubectl vm disk upload --force of a gzipped raw image:\n%s%s", errOut, out)
	requireDiskHolds(t, volume, other)

	// ^C while the image is sent: the pod goes, the record says
	// Importing, and the next upload needs no --force. The image is
	// larger than the disk, so that, were the ^C too late, the import
	// would still end before writing anything.
	huge := filepath.Join(dir, "huge.raw")
	writeTestImage(t, huge, 3*uploadDiskSize, 3)
	cmd := kubectlCmd(t.Context(), append(alice, "disk", "upload", vm, "--disk", "system", "--image", huge, "--force")...)
	var cutOut syncbuffer.Buffer
	cmd.Stdout, cmd.Stderr = &cutOut, &cutOut
	require.NoError(t, cmd.Start())
	record := filepath.Join(node.VolumePath(volume+"-data"), "disk-imports", "import-system-disk.json")
	eventually.Within(t, time.Minute, func() string {
		if b, err := os.ReadFile(record); err != nil || !bytes.Contains(b, []byte(`"upload:huge.raw"`)) {
			return "no record of the upload of huge.raw yet; kubectl vm disk upload says:\n" + cutOut.String()
		}
		return ""
	})
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.Error(t, cmd.Wait(), "the upload was cut off")
	t.Logf("kubectl vm disk upload cut off by SIGINT:\n%s", cutOut.String())
	require.Contains(t, cutOut.String(), "error: vm upload/up: the upload to disk system-disk was interrupted; run it again to finish it")
	require.NotContains(t, cutOut.String(), "Copying stdin failed", "client-go's own words of the cut-off streams")
	_, err = node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-disk-upload", metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the uploader pod is gone: %v", err)
	b, err := os.ReadFile(record)
	require.NoError(t, err)
	require.Contains(t, string(b), `"state": "Importing"`)
	// The VM does not boot from the half-written disk: its runner says
	// why, in kubectl vm status, before qemu starts.
	kubectl(t, "", append(alice, "start", vm)...)
	eventually.Within(t, 2*time.Minute, func() string {
		status := kubectl(t, "", append(alice, "status", vm)...)
		if !regexp.MustCompile(`Failed\s+True\s+ImportFailed\s+\S+\s+disk system-disk may hold part of an image: filling it from upload:huge.raw began`).MatchString(status) {
			return "no ImportFailed for the cut-off upload in kubectl vm status:\n" + status
		}
		return ""
	})
	kubectl(t, "", append(alice, "stop", vm, "--wait", "--timeout", "2m")...)
	out, errOut, err = upload(qcow2)
	require.NoError(t, err, "after a cut-off upload, no --force: stdout: %s\nstderr: %s", out, errOut)
	requireDiskHolds(t, volume, want)
	deleteVM(t, ns, vm)
}

// writeTestImage writes a raw image of size bytes: random data (from seed)
// at its start, at odd places in the middle and at its end, zeros between.
func writeTestImage(t testing.TB, file string, size int64, seed uint64) {
	t.Helper()
	f, err := os.Create(file)
	require.NoError(t, err)
	defer f.Close()
	rng := rand.New(rand.NewPCG(seed, 42))
	// Over half of it data, so that the upload's rate means something.
	for _, r := range [][2]int64{{0, size / 5}, {size/3 + 123, size / 4}, {size*2/3 + 4096, 70000}, {size - size/8, size / 8}} {
		b := make([]byte, r[1])
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		_, err := f.WriteAt(b, r[0])
		require.NoError(t, err)
	}
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
}

func gzipFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	require.NoError(t, err)
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	_, err = w.Write(data)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, os.WriteFile(to, b.Bytes(), 0o644))
}

func qemuImg(t testing.TB, args ...string) {
	t.Helper()
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	require.NoError(t, err, "qemu-img %s: %s", strings.Join(args, " "), out)
}

// requireDiskHolds checks the Block volume's bytes on the node: image's,
// then zeros.
func requireDiskHolds(t testing.TB, volume, image string) {
	t.Helper()
	want, err := os.ReadFile(image)
	require.NoError(t, err)
	got, err := os.ReadFile(node.DiskFile(volume))
	require.NoError(t, err)
	require.Len(t, got, uploadDiskSize)
	require.True(t, bytes.Equal(want, got[:len(want)]), "the disk starts with %s", filepath.Base(image))
	require.True(t, bytes.Equal(make([]byte, len(got)-len(want)), got[len(want):]), "zeros after %s", filepath.Base(image))
}
