package disk_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/disk"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// TestOnAPIServer runs disk upload against a real kube-apiserver with no
// node, on a VM in GitOps mode (its StatefulSet only): an unknown disk and
// a running VM are refused before anything is made; a VM that never ran
// gets its claims, the uploader pod is made and, when it does not run
// within --timeout, deleted again. test/node uploads for real.
func TestOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	const ns = "vms"
	objs := plugintest.StoppedVM(t, c, ns)
	kube := c.Client()
	image := filepath.Join(t.TempDir(), "root.raw")
	require.NoError(t, os.WriteFile(image, []byte("not much of a disk"), 0o644))
	upload := func(args ...string) plugintest.Result {
		return plugintest.Run(ctx, "", append([]string{"--kubeconfig", c.Kubeconfig, "-n", ns, "disk", "upload", "web", "--image", image}, args...)...)
	}
	claims := kube.CoreV1().PersistentVolumeClaims(ns)
	pods := kube.CoreV1().Pods(ns)

	t.Run("unknown disk", func(t *testing.T) {
		r := upload("--disk", "data")
		require.EqualError(t, r.Err, `--disk "data": vm vms/web has no such disk; its disks: root-disk`)
	})

	t.Run("running VM", func(t *testing.T) {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: render.SelectorLabels("web")},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: render.ContainerRunner, Image: "runner"}}},
		}
		_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		require.NoError(t, err)
		r := upload("--disk", "root")
		require.EqualError(t, r.Err, "vm vms/web is running (its pod web-0 exists): stop it first (kubectl vm stop web --wait)")
		require.NoError(t, pods.Delete(ctx, "web-0", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		_, err = claims.Get(ctx, "root-disk-web-0", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "no claim made for a running VM: %v", err)
	})

	t.Run("an upload under way", func(t *testing.T) {
		_, err := pods.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: disk.PodName("web"), Labels: render.Labels("web")},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: render.ContainerRunner, Image: "runner"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		r := upload("--disk", "root")
		require.EqualError(t, r.Err, "pod vms/web-disk-upload exists: another upload for vm web runs, or one ended without deleting it (then: kubectl delete pod -n vms web-disk-upload)")
		_, err = claims.Get(ctx, "root-disk-web-0", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "no claim made beside another upload: %v", err)
		require.NoError(t, pods.Delete(ctx, disk.PodName("web"), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
	})

	t.Run("never ran", func(t *testing.T) {
		r := upload("--disk", "root-disk", "--timeout", "2s")
		require.EqualError(t, r.Err, "pod vms/web-disk-upload did not run within 2s (--timeout)")
		require.Equal(t, "persistentvolumeclaim/root-disk-web-0 created\npersistentvolumeclaim/runner-data-web-0 created\npod/web-disk-upload created; waiting for it to run\n", r.Stderr)
		for _, name := range []string{"root-disk", render.VolumeRunnerData} {
			claim, err := claims.Get(ctx, name+"-web-0", metav1.GetOptions{})
			require.NoError(t, err)
			require.Equal(t, render.Labels("web"), claim.Labels)
			for _, tmpl := range objs.StatefulSet.Spec.VolumeClaimTemplates {
				if tmpl.Name == name {
					require.Equal(t, tmpl.Spec.Resources, claim.Spec.Resources)
					require.Equal(t, tmpl.Spec.VolumeMode, claim.Spec.VolumeMode)
					require.Equal(t, tmpl.Spec.StorageClassName, claim.Spec.StorageClassName)
				}
			}
		}
		_, err := pods.Get(ctx, disk.PodName("web"), metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "the uploader pod is deleted: %v", err)

		// The claims exist now: the next upload takes them as they are.
		r = upload("--disk", "root", "--timeout", "1s")
		require.Equal(t, "pod/web-disk-upload created; waiting for it to run\n", r.Stderr)
	})
}

// TestFlags: what is checked before the cluster is asked.
func TestFlags(t *testing.T) {
	run := func(args ...string) error {
		return plugintest.Run(t.Context(), "", append([]string{"disk", "upload"}, args...)...).Err
	}
	require.EqualError(t, run("web"), "--disk is required: the disk to fill, e.g. root\n--image is required: the image file to upload")
	require.EqualError(t, run("web", "--disk", "root", "--image", "/nonexistent/root.qcow2"), "--image: stat /nonexistent/root.qcow2: no such file or directory")
	dir := t.TempDir()
	require.EqualError(t, run("web", "--disk", "root", "--image", dir), "--image "+dir+": not a regular file")
	empty := filepath.Join(dir, "empty.qcow2")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	require.EqualError(t, run("web", "--disk", "root", "--image", empty, "--timeout", "0s"), "--image "+empty+": the file is empty\n--timeout 0s: must be more than 0")
	require.EqualError(t, run("web", "--disk", "root"), "--image is required: the image file to upload")
	require.EqualError(t, run("--disk", "root"), "accepts 1 arg(s), received 0")
}
