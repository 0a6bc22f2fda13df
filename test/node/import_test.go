package node

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmop/vmop/test/harness/debianguest"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testnode"
)

// sourcedGuestVM is the test guest with a disk filled from a source at
// its first start: 1 name, 2 namespace, 3 storage class, 4 volume mode,
// 5 claim size, 6 the source's field ("url: ..."), 7 its checksum.
const sourcedGuestVM = guestVMHead + `    state: Running
` + guestMachine + `          storageClassName: %[3]s
          volumeMode: %[4]s
          selector:
            matchLabels:
              disk: %[2]s-%[1]s
          resources:
            requests:
              storage: %[5]s
      source:
        %[6]s
        checksum: "%[7]s"
`

// TestImportCloudImage is a server user's way from a cloud image, in
// operator mode: the Debian guest's disk as qcow2 (as clouds publish their
// images), served over http at the node's address, fills the empty Block
// claim of a VM made by kubectl vm create --image --image-checksum, while
// kubectl vm start --wait shows how far the import got; the guest boots
// from it with cloud-init's hostname and SSH key. A restarted VM does not
// import again (the server sees no second request). A wrong checksum
// leaves its claim untouched and says so in kubectl vm status.
func TestImportCloudImage(t *testing.T) {
	const ns, vm, bad = "import", "cloud", "badsum"
	installVmop(t)
	createNamespace(t, ns)

	qcow2 := filepath.Join(t.TempDir(), "debian.qcow2")
	out, err := exec.Command("qemu-img", "convert", "-O", "qcow2", debianguest.Image(t), qcow2).CombinedOutput()
	require.NoError(t, err, "qemu-img convert: %s", out)
	sum := fileSHA256(t, qcow2)
	url, requests := serveFile(t, qcow2)

	// Distinct sizes: each claim binds the volume meant for it.
	good := testnode.Volume{Name: ns + "-" + vm, Size: resource.MustParse("3Gi")}
	wrong := testnode.Volume{Name: ns + "-" + bad, Size: resource.MustParse("2200Mi")}
	for _, v := range []testnode.Volume{good, wrong} {
		require.NoError(t, node.AddBlockVolume(t.Context(), v))
		require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: v.Name + "-data", Size: resource.MustParse("16Mi")}))
	}

	home, key := sshKey(t, "import@vmop-test")

	kubectl(t, "", "vm", "create", vm, "-n", ns, "--cpus", "1", "--ram", "1Gi", "--disk", "3Gi,"+testnode.StorageClassBlock,
		"--image", url, "--image-checksum", sum, "--ssh-key", key+".pub")
	start := time.Now()
	started := kubectl(t, "", "vm", "start", vm, "-n", ns, "--wait", "--timeout", "5m")
	t.Logf("kubectl vm start --wait (%.0f s):\n%s", time.Since(start).Seconds(), started)
	require.Regexp(t, `Starting, disk system-disk: (downloading|converting) \d+Mi of \d+Mi \(\d+%\)`, started, "the import's progress")
	require.Equal(t, int64(1), requests.Load(), "GETs of the image")
	status := kubectl(t, "", "vm", "status", vm, "-n", ns)
	require.Contains(t, status, "disk system-disk: imported "+url+" (qcow2, 2Gi")
	requireEvents(t, ns, "vm/"+vm, "Importing", "Imported")

	t.Run("cloud-init", func(t *testing.T) {
		out := waitSSH(t, debianBootWait, guestSSH(ns, vm, home, key, "hostname; id -un"))
		t.Logf("kubectl vm ssh %s -- 'hostname; id -un' %.0f s after kubectl vm start:\n%s", vm, time.Since(start).Seconds(), out)
		require.Equal(t, vm+"\ndebian\n", out)
	})

	t.Run("restart does not import", func(t *testing.T) {
		kubectl(t, "", "vm", "restart", vm, "-n", ns, "--wait", "--timeout", "5m")
		logs := kubectl(t, "", "logs", "-n", ns, vm+"-0", "-c", "import")
		require.Contains(t, logs, "Imported before; the disk is kept")
		require.Equal(t, int64(1), requests.Load(), "GETs of the image after the restart")
		// The guest boots again from its own disk, and then shuts down
		// cleanly when asked.
		waitConsole(t, ns, vm, vm+" login:", debianBootWait)
		kubectl(t, "", "vm", "stop", vm, "-n", ns, "--wait", "--timeout", "3m")
	})

	t.Run("wrong checksum", func(t *testing.T) {
		other := "sha256:" + strings.Repeat("0", 64)
		kubectl(t, "", "vm", "create", bad, "-n", ns, "--cpus", "1", "--ram", "256Mi", "--disk", "2200Mi,"+testnode.StorageClassBlock,
			"--image", url, "--image-checksum", other, "--running")
		var status string
		eventually.Within(t, 3*time.Minute, func() string {
			status = kubectl(t, "", "vm", "status", bad, "-n", ns)
			for _, want := range []string{
				`Imported\s+False\s+ChecksumMismatch\s+\S+\s+disk system-disk: \S+: checksum mismatch: want ` + other,
				`Failed\s+True\s+ImportFailed\s+\S+\s+disk system-disk: \S+: checksum mismatch`,
			} {
				if !regexp.MustCompile(want).MatchString(status) {
					return fmt.Sprintf("no %q in kubectl vm status:\n%s", want, status)
				}
			}
			return ""
		})
		t.Logf("kubectl vm status %s:\n%s", bad, status)
		requireEvents(t, ns, "vm/"+bad, "ImportFailed")
		kubectl(t, "", "vm", "stop", bad, "-n", ns, "--wait", "--timeout", "3m")
		requireZeros(t, node.DiskFile(wrong.Name))
	})
}

// serveFile serves path over http at the node's address, where the pods
// reach it and nothing outside the machine does, and counts the GETs.
func serveFile(t *testing.T, path string) (string, *atomic.Int64) {
	l, err := net.Listen("tcp", net.JoinHostPort(testnode.IP, "0"))
	require.NoError(t, err)
	var gets atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			gets.Add(1)
		}
		http.ServeFile(w, r, path)
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String() + "/" + filepath.Base(path), &gets
}

func fileSHA256(t *testing.T, path string) string {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// requireZeros fails unless the file holds zeros alone.
func requireZeros(t *testing.T, path string) {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	buf := make([]byte, 1<<20)
	var off int64
	for {
		n, err := f.Read(buf)
		for i, b := range buf[:n] {
			if b != 0 {
				t.Fatalf("%s: byte %d is %#x, not 0", path, off+int64(i), b)
			}
		}
		off += int64(n)
		if err == io.EOF {
			return
		}
		require.NoError(t, err)
	}
}
