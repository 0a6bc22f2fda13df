package agent

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/podnet"
	"github.com/vmop/vmop/test/harness/prereq"
)

// TestOwnDevice gives the runner a device of a container's root, and
// nothing a link or a file names.
func TestOwnDevice(t *testing.T) {
	prereq.Root(t, "it makes device nodes and changes their owner")
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev", "net"), 0o755))
	tun := filepath.Join(root, "dev", "net", "tun")
	require.NoError(t, unix.Mknod(tun, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 200))))
	outside := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(outside, nil, 0o600))
	require.NoError(t, os.Symlink(outside, filepath.Join(root, "dev", "kvm")))
	require.NoError(t, os.WriteFile(filepath.Join(root, "dev", "vhost-net"), nil, 0o600))

	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	require.NoError(t, ownDevice(fd, "/dev/net/tun"))
	require.NoError(t, ownDevice(fd, "/dev/none"), "a device the container lacks is no error")
	require.ErrorContains(t, ownDevice(fd, "/dev/kvm"), "/dev/kvm is not a device", "a link is not followed")
	err = ownDevice(fd, "/dev/vhost-net")
	require.ErrorIs(t, err, errRefused)
	require.ErrorContains(t, err, "/dev/vhost-net is not a device")
	require.NoError(t, ownDevice(fd, "/../../"+outside), "a path that leaves the root stays in it, and finds nothing")

	owner := func(p string) uint32 {
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p, &st))
		return st.Uid
	}
	require.EqualValues(t, nodeagent.RunnerUID, owner(tun))
	require.EqualValues(t, 0, owner(outside))
}

// TestPodNetworkInNetns makes the pod network in another network
// namespace from the agent's thread, as for a VM pod, and leaves the
// agent's own namespace alone.
func TestPodNetworkInNetns(t *testing.T) {
	prereq.Root(t, "it makes a network namespace")
	prereq.Commands(t, "iproute2", "ip")
	ns := "vmop-agent-test"
	run := func(args ...string) string {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		require.NoError(t, err, "%s: %s", args, out)
		return string(out)
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
	run("ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("ip", "link", "add", "vmop-agent0", "type", "veth", "peer", "name", "eth0", "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", "vmop-agent0").Run() })
	run("ip", "-n", ns, "link", "set", "eth0", "mtu", "1400", "up")
	run("ip", "-n", ns, "addr", "add", "10.98.9.2/24", "dev", "eth0")
	run("ip", "-n", ns, "route", "add", "default", "via", "10.98.9.1")

	var n *podnet.Network
	f, err := os.Open("/run/netns/" + ns)
	require.NoError(t, err)
	defer f.Close()
	err = inNetns(int(f.Fd()), func() error {
		var err error
		n, err = podnet.Setup(podnet.Options{Net: mustPrefix(t, "10.0.2.0/24"), TapOwner: nodeagent.RunnerUID})
		return err
	})
	require.NoError(t, err)
	require.Equal(t, "eth0", n.Uplink)
	require.Equal(t, "10.98.9.2", n.PodIP.String())
	require.Equal(t, 1400, n.MTU)
	link := run("ip", "-n", ns, "-d", "link", "show", podnet.Tap)
	require.Contains(t, link, "persist on user 107 group ", "group 107 has a name on some hosts")
	require.Contains(t, run("ip", "netns", "exec", ns, "nft", "list", "tables"), "vmop-pod-network")
	require.Equal(t, "67\n", run("ip", "netns", "exec", ns, "cat", "/proc/sys/net/ipv4/ip_unprivileged_port_start"))
	_, err = os.Stat("/sys/class/net/" + podnet.Tap)
	require.ErrorIs(t, err, os.ErrNotExist, "the tap is in the pod's namespace only")
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	p, err := netip.ParsePrefix(s)
	require.NoError(t, err)
	return p
}
