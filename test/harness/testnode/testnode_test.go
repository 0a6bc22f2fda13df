package testnode

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/test/harness/prereq"
)

// TestNode runs pods on one node: one with a Block and a Filesystem claim,
// and pods behind Services (services_test.go); then it checks that nothing
// of the node is left on the host.
func TestNode(t *testing.T) {
	skipWithout(t)
	// The lock from before to after: no other test's node may change the
	// host meanwhile.
	unlock, err := lockNode()
	require.NoError(t, err)
	defer unlock()
	require.NoError(t, prepareHost())
	before := hostSnapshot(t)
	t.Run("node", func(t *testing.T) {
		begin := time.Now()
		n, err := start(t.Context(), Options{})
		require.NoError(t, err)
		t.Logf("node started in %v", time.Since(begin).Round(time.Millisecond))
		t.Cleanup(func() { require.NoError(t, n.Stop()) })
		t.Run("pod", func(t *testing.T) { testPod(t, n) })
		t.Run("services", func(t *testing.T) { testServices(t, n, before) })
		t.Run("service range stays", func(t *testing.T) { testServiceRangeStays(t, n) })
	})
	require.Equal(t, before, hostSnapshot(t), "the host after the node stopped")
}

// testPod runs a pod with a Block and a Filesystem claim.
func testPod(t *testing.T, n *Node) {
	ctx := t.Context()
	require.NoError(t, n.AddBlockVolume(ctx, Volume{Name: "disk", Size: resource.MustParse("64Mi")}))
	require.NoError(t, n.AddFilesystemVolume(ctx, Volume{Name: "data", Size: resource.MustParse("1Gi")}))
	claims := n.Client.CoreV1().PersistentVolumeClaims("default")
	block := corev1.PersistentVolumeBlock
	for _, c := range []*corev1.PersistentVolumeClaim{
		{ObjectMeta: metav1.ObjectMeta{Name: "disk"}, Spec: corev1.PersistentVolumeClaimSpec{
			StorageClassName: ptr.To(StorageClassBlock), VolumeMode: &block,
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("64Mi")}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "data"}, Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Mi")}}}},
	} {
		_, err := claims.Create(ctx, c, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "c", Image: pauseImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
				VolumeDevices:   []corev1.VolumeDevice{{Name: "disk", DevicePath: "/dev/disk"}},
				VolumeMounts:    []corev1.VolumeMount{{Name: "data", MountPath: "/data"}},
			}},
			Volumes: []corev1.Volume{
				{Name: "disk", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "disk"}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
			},
		},
	}
	start := time.Now()
	pod = runPod(t, n, pod, corev1.PodRunning)
	t.Logf("pod Running %v after create, on %s with IP %s", time.Since(start).Round(time.Millisecond), pod.Spec.NodeName, pod.Status.PodIP)
	require.Equal(t, Name, pod.Spec.NodeName)
	require.True(t, strings.HasPrefix(pod.Status.PodIP, subnetPrefix), pod.Status.PodIP)
}

// hostSnapshot is what of the host the node changes, or might: links,
// routes, iptables rules, loop devices, mounts and sysctls (the kubelet's;
// proxySysctls, those kube-proxy could change, are to stay as they are
// even while it runs).
func hostSnapshot(t *testing.T) map[string]string {
	s := map[string]string{}
	for name, cmd := range map[string][]string{
		"links":   {"ip", "-br", "link"},
		"routes":  {"ip", "route"},
		"filter":  {"iptables", "-S"},
		"nat":     {"iptables", "-t", "nat", "-S"},
		"mangle":  {"iptables", "-t", "mangle", "-S"},
		"ip6":     {"sh", "-c", "for t in filter nat mangle; do ip6tables -t $t -S; done"},
		"nfacct":  {"nfacct", "list"},
		"loops":   {"losetup", "--list", "--noheadings"},
		"netns":   {"ip", "netns", "list"},
		"mounts":  {"sh", "-c", "grep -c . /proc/self/mountinfo"},
		"sysctls": {"sysctl", "kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory"},
		proxySysctls: {"sysctl", "net.ipv4.conf.all.route_localnet", "net.netfilter.nf_conntrack_max",
			"net.netfilter.nf_conntrack_tcp_timeout_established", "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
			"net.netfilter.nf_conntrack_tcp_be_liberal", "net.netfilter.nf_conntrack_udp_timeout",
			"net.netfilter.nf_conntrack_udp_timeout_stream"},
	} {
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", cmd, out)
		s[name] = string(out)
	}
	return s
}

// skipWithout skips t under -short and fails it when the machine cannot
// run a node.
func skipWithout(t testing.TB) {
	t.Helper()
	prereq.Installed(t, "root, containerd, runc, iptables, the CNI plugins and a control plane", Check)
}
