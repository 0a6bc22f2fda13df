package testnode

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// TestNode runs a pod with a Block and a Filesystem claim on the node and
// checks that nothing of the node is left on the host afterwards.
func TestNode(t *testing.T) {
	skipWithout(t)
	// The lock from before to after: no other test's node may change the
	// host meanwhile.
	unlock, err := lockNode()
	require.NoError(t, err)
	defer unlock()
	cleanStale()
	before := hostSnapshot(t)
	t.Run("pod", func(t *testing.T) {
		ctx := t.Context()
		n, err := start(ctx, Options{})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, n.Stop()) })
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
		_, err = n.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		start := time.Now()
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			p, err := n.Client.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			pod = p
			return p.Status.Phase == corev1.PodRunning, nil
		})
		require.NoError(t, err, "pod status: %+v", pod.Status)
		t.Logf("pod Running %v after create, on %s with IP %s", time.Since(start).Round(time.Millisecond), pod.Spec.NodeName, pod.Status.PodIP)
		require.Equal(t, Name, pod.Spec.NodeName)
		require.True(t, strings.HasPrefix(pod.Status.PodIP, subnetPrefix), pod.Status.PodIP)
	})
	require.Equal(t, before, hostSnapshot(t), "the host after the node stopped")
}

// hostSnapshot is what of the host the node changes: links, routes,
// iptables rules, loop devices and mounts.
func hostSnapshot(t *testing.T) map[string]string {
	s := map[string]string{}
	for name, cmd := range map[string][]string{
		"links":   {"ip", "-br", "link"},
		"routes":  {"ip", "route"},
		"filter":  {"iptables", "-S"},
		"nat":     {"iptables", "-t", "nat", "-S"},
		"loops":   {"losetup", "--list", "--noheadings"},
		"netns":   {"ip", "netns", "list"},
		"mounts":  {"sh", "-c", "grep -c . /proc/self/mountinfo"},
		"sysctls": {"sysctl", "kernel.panic", "kernel.panic_on_oops", "vm.overcommit_memory"},
	} {
		out, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		require.NoError(t, err, "%v: %s", cmd, out)
		s[name] = string(out)
	}
	return s
}

// skipWithout skips t when the machine cannot run a node, or fails it when
// VMOP_REQUIRE_CONTAINERD says that it must.
func skipWithout(t testing.TB) {
	t.Helper()
	if err := Check(); err != nil {
		if os.Getenv("VMOP_REQUIRE_CONTAINERD") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}
