package node

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/test/harness/debianguest"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testnode"
)

// debianBootWait bounds a boot of the Debian guest under TCG (about two
// minutes) and one more: a boot that meets qemu's TCG deadlock (SPICE and
// virtio-gpu's reset, operator.md) is killed by the runner's watchdog
// after five minutes and boots again.
const debianBootWait = 10 * time.Minute

// TestDebianServer is a server user's way in operator mode, with the
// rights of the vm-user role alone: kubectl vm create writes a VM with an
// SSH key, its pod boots the real Debian guest from a Block disk, the
// serial console shows the guest's login prompt and answers what is typed,
// and kubectl vm ssh runs commands in the guest with the user's own ssh,
// through the API server, pods/exec and the runner to the guest's sshd on
// the pod's network (create's default), where the node reaches it too, at
// the pod's IP; Debian's own DHCP client took the address the runner
// serves.
func TestDebianServer(t *testing.T) {
	const ns, vm = "server", "deb"
	installVmop(t)
	createNamespace(t, ns)
	// What docs/operator.md (Rights for VM users) tells an administrator
	// to run for a VM user.
	kubectl(t, "", "create", "serviceaccount", "-n", ns, "alice")
	kubectl(t, "", "create", "rolebinding", "alice", "-n", ns, "--clusterrole", install.UserClusterRole, "--serviceaccount", ns+":alice")
	as := "system:serviceaccount:" + ns + ":alice"
	alice := func(t testing.TB, args ...string) string {
		t.Helper()
		return kubectl(t, "", append([]string{"vm", "--as", as, "-n", ns}, args...)...)
	}

	image := debianguest.Image(t)
	fi, err := os.Stat(image)
	require.NoError(t, err)
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
		Name: ns + "-" + vm, Size: *resource.NewQuantity(fi.Size(), resource.BinarySI), Content: image,
	}))
	require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: ns + "-" + vm + "-data", Size: resource.MustParse("16Mi")}))

	home, key := sshKey(t, "alice@vmop-test")

	// The disk's size finds the volume: no other volume of the node is as
	// large.
	created := alice(t, "create", vm, "--cpus", "1", "--ram", "1Gi", "--disk", fmt.Sprintf("%d,%s", fi.Size(), testnode.StorageClassBlock),
		"--ssh-key", key+".pub", "--running")
	require.Equal(t, "virtualmachine.vmoperator.jdrupes.org/"+vm+" created\n", created)
	start := time.Now()
	prompt := vm + " login:"
	waitConsole(t, ns, vm, prompt, debianBootWait)
	t.Logf("the guest's login prompt on its serial console %.0f s after kubectl vm create", time.Since(start).Seconds())
	requireUnprivileged(t, ns, vm)

	t.Run("serial console", func(t *testing.T) {
		logs := alice(t, "logs", vm)
		require.Contains(t, logs, "Debian GNU/Linux")
		require.Contains(t, logs, prompt)
		lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
		t.Logf("kubectl vm logs %s, the last lines:\n%s", vm, strings.Join(lines[max(0, len(lines)-6):], "\n"))
		term := attachSerial(t, ns, vm, "--as", as)
		term.write(t, "debian\r")
		term.wait(t, "Password:")
		// A login that fails brings the prompt back.
		term.write(t, "wrong\r")
		term.wait(t, "Login incorrect")
		term.leave(t)
		t.Logf("kubectl vm console --serial under a terminal:\n%s", term.screen.String())
	})

	t.Run("ssh", func(t *testing.T) {
		ssh := func(command string) []string { return guestSSH(ns, vm, home, key, command, "--as", as) }
		out := waitSSH(t, 4*time.Minute, ssh("hostname; id -un"))
		t.Logf("kubectl vm ssh -i KEY debian@%s -- 'hostname; id -un' %.0f s after kubectl vm create:\n%s", vm, time.Since(start).Seconds(), out)
		require.Equal(t, vm+"\ndebian\n", out)
		// Debian's ssh hashes known_hosts: ssh-keygen finds the name.
		found, err := exec.Command("ssh-keygen", "-F", "vm."+vm+"."+ns, "-f", filepath.Join(home, "known_hosts")).CombinedOutput()
		require.NoError(t, err, "known_hosts has no key of vm.%s.%s: %s", vm, ns, found)

		_, _, err = kubectlResult(t.Context(), "", ssh("exit 3")...)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 3, exit.ExitCode(), "the remote command's exit code")
	})

	t.Run("sshd at the pod's IP", func(t *testing.T) {
		pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
		require.NoError(t, err)
		c, err := net.DialTimeout("tcp", net.JoinHostPort(pod.Status.PodIP, "22"), 20*time.Second)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		banner, err := bufio.NewReader(c).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(banner, "SSH-2.0-OpenSSH_"), "banner %q", banner)
		// The agent reports the address the runner's DHCP server gave.
		require.Contains(t, alice(t, "status", vm), "10.0.2.15/24")
	})

	t.Run("sshd through a Service", func(t *testing.T) {
		out := kubectl(t, "", "vm", "expose", "-n", ns, vm, "--port", "2222:22")
		t.Logf("kubectl vm expose %s --port 2222:22: %s", vm, strings.TrimSpace(out))
		svc, err := node.Client.CoreV1().Services(ns).Get(t.Context(), vm+"-2222", metav1.GetOptions{})
		require.NoError(t, err)
		var banner string
		eventually.Within(t, time.Minute, func() string {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(svc.Spec.ClusterIP, "2222"), 5*time.Second)
			if err != nil {
				return fmt.Sprintf("Service %s at %s:2222: %v", svc.Name, svc.Spec.ClusterIP, err)
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			banner, err = bufio.NewReader(c).ReadString('\n')
			if err != nil {
				return fmt.Sprintf("Service %s at %s:2222: %v", svc.Name, svc.Spec.ClusterIP, err)
			}
			return ""
		})
		require.True(t, strings.HasPrefix(banner, "SSH-2.0-OpenSSH_"), "banner %q", banner)
	})

	// An online snapshot of the 2 GiB disk (615 MiB used), for a clone
	// once the VM stopped (the clone boots on the node's 2 CPUs alone).
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
		Name: ns + "-golden", Size: *resource.NewQuantity(fi.Size(), resource.BinarySI),
	}))
	identity := guestIdentity(t, ns, vm, home, key)
	snap := kubectl(t, "", "vm", "snapshot", "-n", ns, vm, "--name", "golden")
	require.Regexp(t, `^snapshot golden of vm server/deb taken in [0-9.]+s: 1 disk, 2048 MiB; consistent, the guest frozen for [0-9.]+s\n$`, snap)
	t.Logf("online snapshot of the 2 GiB disk: %s", strings.TrimSpace(snap))

	start = time.Now()
	alice(t, "stop", vm, "--wait", "--timeout", "3m")
	t.Logf("kubectl vm stop --wait: %.1f s", time.Since(start).Seconds())
	requireEvents(t, ns, "vm/"+vm, "ShutdownCompleted", "after it was asked to")

	t.Run("clone", func(t *testing.T) {
		const twin = "deb2"
		require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
			Name: ns + "-" + twin, Size: *resource.NewQuantity(fi.Size(), resource.BinarySI),
		}))
		require.NoError(t, node.AddFilesystemVolume(t.Context(), testnode.Volume{Name: ns + "-" + twin + "-data", Size: resource.MustParse("16Mi")}))
		start := time.Now()
		out, errOut, err := kubectlResult(t.Context(), "", "vm", "clone", "-n", ns, vm, twin, "--snapshot", "golden")
		require.NoError(t, err, errOut)
		t.Logf("kubectl vm clone of the 2 GiB disk: %.1f s:\n%s", time.Since(start).Seconds(), errOut)
		require.Equal(t, "vm server/deb2 cloned from snapshot golden of deb\n", out)
		require.Contains(t, errOut, "disk system-disk: a new machine id in /etc/machine-id on partition 3\n")
		defer deleteVM(t, ns, twin)
		waitConsole(t, ns, twin, twin+" login:", debianBootWait)
		waitSSH(t, 4*time.Minute, guestSSH(ns, twin, home, key, "true"))
		cloned := guestIdentity(t, ns, twin, home, key)
		t.Logf("the original's identity: %v; the clone's: %v", identity, cloned)
		require.Equal(t, []string{vm, twin}, []string{identity[3], cloned[3]}, "host names")
		for i, what := range []string{"machine id", "SMBIOS uuid", "cloud-init instance-id"} {
			require.NotEqual(t, identity[i], cloned[i], what)
		}
		require.Regexp(t, `^[0-9a-f]{32}$`, cloned[0])
	})
	kubectl(t, "", "vm", "snapshot", "delete", "-n", ns, vm, "golden")
	deleteVM(t, ns, vm)
}

// guestIdentity is what makes the Debian guest a machine of its own: its
// machine id, SMBIOS uuid, cloud-init instance-id and host name.
func guestIdentity(t *testing.T, ns, vm, home, key string) []string {
	t.Helper()
	out := kubectl(t, "", guestSSH(ns, vm, home, key,
		"cat /etc/machine-id; sudo -n cat /sys/class/dmi/id/product_uuid; cat /var/lib/cloud/data/instance-id; hostname")...)
	id := strings.Fields(out)
	require.Len(t, id, 4, out)
	return id
}

// sshKey makes an ed25519 key pair without a passphrase in a new home
// directory: the key's path (its public half beside it, .pub) and the
// home for known_hosts.
func sshKey(t *testing.T, comment string) (home, key string) {
	home = t.TempDir()
	key = filepath.Join(home, "id_ed25519")
	out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key).CombinedOutput()
	require.NoError(t, err, "ssh-keygen: %s", out)
	return home, key
}

// guestSSH is kubectl vm ssh to the Debian guest's default user with key,
// known_hosts in home; extra are kubectl's flags (--as).
func guestSSH(ns, vm, home, key, command string, extra ...string) []string {
	args := append([]string{"vm", "ssh"}, extra...)
	return append(args, "-n", ns, "-i", key, "-o", "BatchMode=yes",
		"-o", "StrictHostKeyChecking=accept-new", "-o", "UserKnownHostsFile="+filepath.Join(home, "known_hosts"),
		"debian@"+vm, "--", command)
}

// waitSSH runs kubectl with args until it succeeds and returns its
// output: sshd answers once cloud-init has made its host keys and given
// the default user the key.
func waitSSH(t *testing.T, timeout time.Duration, args []string) string {
	var out string
	eventually.Within(t, timeout, func() string {
		o, errOut, err := kubectlResult(t.Context(), "", args...)
		if err != nil {
			return fmt.Sprintf("kubectl vm ssh: %v: %s", err, errOut)
		}
		out = o
		return ""
	})
	return out
}
