package agent

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/nodeagent"
	"github.com/vmop/vmop/pkg/podnet"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/prereq"
)

const runnerRepo = "ghcr.io/vmop/vm-runner"

func newAgent(t *testing.T) *Agent {
	a, err := New(Options{NodeName: "n", KubeletRootDir: t.TempDir(), RunnerRepositories: []string{runnerRepo}, Proc: t.TempDir()})
	require.NoError(t, err)
	return a
}

// vmPod is a pod as render makes it, as far as the agent looks.
func vmPod() *corev1.Pod {
	c := corev1.Container{Name: "runner", Image: runnerRepo + ":v1.2.3",
		VolumeMounts:  []corev1.VolumeMount{{Name: nodeagent.Volume, MountPath: nodeagent.Dir}},
		VolumeDevices: []corev1.VolumeDevice{{Name: "system-disk", DevicePath: "/dev/system-disk"}}}
	imp := c
	imp.Name = "import"
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "vm-0", UID: "0b0e8f4e-1c9a-4b53-9d3a-6f0c2f1d2e3a",
			Labels: render.Labels("vm")},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{imp,
				// A containerDisk's fetch container runs another image, but
				// cannot reach the socket.
				{Name: "fetch-0", Image: "example.org/disks/debian:13"}},
			Containers: []corev1.Container{c},
			Volumes:    []corev1.Volume{{Name: nodeagent.Volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

func TestNewNeedsRepository(t *testing.T) {
	_, err := New(Options{})
	require.EqualError(t, err, "no runner repository to trust")
	_, err = New(Options{RunnerRepositories: []string{"UPPER/case"}})
	require.ErrorContains(t, err, `runner repository "UPPER/case"`)
}

func TestTrustPod(t *testing.T) {
	a := newAgent(t)
	require.NoError(t, a.trustPod(vmPod()))
	digest := vmPod()
	digest.Spec.Containers[0].Image = runnerRepo + "@sha256:" + strings.Repeat("a", 64)
	require.NoError(t, a.trustPod(digest), "a digest names the same repository")

	for name, tc := range map[string]struct {
		change func(*corev1.Pod)
		want   string
	}{
		"labels only": {func(p *corev1.Pod) { p.Spec.Containers[0].Image = "example.org/evil:1" },
			"container runner of pod ns/vm-0 runs image example.org/evil:1, not a vmop runner image the node agent trusts (ghcr.io/vmop/vm-runner)"},
		"similar repository": {func(p *corev1.Pod) { p.Spec.InitContainers[0].Image = runnerRepo + "-evil:v1" },
			"container import of pod ns/vm-0 runs image ghcr.io/vmop/vm-runner-evil:v1"},
		"ephemeral container": {func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", VolumeMounts: []corev1.VolumeMount{{Name: nodeagent.Volume, MountPath: "/x"}}}}}
		}, "container debug of pod ns/vm-0 runs image busybox"},
		"not vmop's":   {func(p *corev1.Pod) { p.Labels = nil }, "pod ns/vm-0 is not labelled app.kubernetes.io/managed-by=vm-operator"},
		"host network": {func(p *corev1.Pod) { p.Spec.HostNetwork = true }, "shares a namespace of the node"},
		"privileged": {func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
		}, "container runner of pod ns/vm-0 is privileged"},
		"no socket": {func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = nil
			p.Spec.InitContainers[0].VolumeMounts = nil
		}, "no container of pod ns/vm-0 mounts volume vm-node"},
		"host path": {func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}, "volume vm-node of pod ns/vm-0 is not an emptyDir"},
	} {
		t.Run(name, func(t *testing.T) {
			p := vmPod()
			tc.change(p)
			err := a.trustPod(p)
			require.ErrorIs(t, err, errRefused)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// fakeProc makes a process pid under a.o.Proc with a root directory, and
// returns the root.
func fakeProc(t *testing.T, a *Agent, pid int) string {
	root := filepath.Join(a.procPath(pid), "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, nodeagent.Dir), 0o755))
	return root
}

// socketIn makes the pod's socket (a stand-in file) in a fake process's
// root and returns its identity.
func socketIn(t *testing.T, root string) fileID {
	p := filepath.Join(root, nodeagent.Dir, nodeagent.Socket)
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(p, &st))
	return statID(&st)
}

func TestTrustPeer(t *testing.T) {
	a := newAgent(t)
	pod := vmPod()
	sock := socketIn(t, fakeProc(t, a, 100))
	other := socketIn(t, fakeProc(t, a, 200))
	require.NotEqual(t, sock, other)
	link := fakeProc(t, a, 201)
	require.NoError(t, os.Symlink(filepath.Join(a.procPath(100), "root", nodeagent.Dir, nodeagent.Socket), filepath.Join(link, nodeagent.Dir, nodeagent.Socket)))
	fakeProc(t, a, 400)

	root, err := a.trustPeer(pod, 100, nodeagent.RunnerUID, sock)
	require.NoError(t, err)
	require.NoError(t, unix.Close(root), "trustPeer returns the container's root, open")
	for _, tc := range []struct {
		pid, uid int
		want     string
	}{
		{100, 0, "runs as uid 0, not the runner's 107"},
		{200, nodeagent.RunnerUID, "the asking process 200 is not in pod ns/vm-0: it does not have the pod's socket at /run/vmop-node"},
		{201, nodeagent.RunnerUID, "the asking process 201 is not in pod ns/vm-0"},
		{400, nodeagent.RunnerUID, "the asking process 400 is not in pod ns/vm-0"},
	} {
		_, err := a.trustPeer(pod, tc.pid, tc.uid, sock)
		require.ErrorIs(t, err, errRefused, "pid %d", tc.pid)
		require.ErrorContains(t, err, tc.want)
	}
}

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
	err := inNetns("/run/netns/"+ns, func() error {
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
