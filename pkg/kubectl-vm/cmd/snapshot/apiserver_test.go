package snapshot_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmsnapshot"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// TestOnAPIServer runs snapshot, restore and clone against a real
// kube-apiserver with no node, on a stopped VM in GitOps mode: a VM that
// never ran has nothing to snapshot; a snapshot whose pod does not run
// within --timeout leaves nothing behind; names are checked first.
// test/node takes, restores and clones snapshots for real.
func TestOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	const ns = "vms"
	plugintest.StoppedVM(t, c, ns)
	kube := c.Client()
	run := func(args ...string) plugintest.Result {
		return plugintest.Run(ctx, "", append([]string{"--kubeconfig", c.Kubeconfig, "-n", ns}, args...)...)
	}

	r := run("snapshot", "web")
	require.EqualError(t, r.Err, "vm vms/web never ran: its disk root-disk has no claim (root-disk-web-0) yet, so there is nothing to snapshot")

	claims := kube.CoreV1().PersistentVolumeClaims(ns)
	for _, name := range []string{"root-disk-web-0", "runner-data-web-0"} {
		_, err := claims.Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PersistentVolumeClaimSpec{
				AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	r = run("snapshot", "web", "--name", "s1", "--timeout", "2s")
	require.EqualError(t, r.Err, "snapshot s1 of vm vms/web: pod vms/web-snapshot did not run within 2s (--timeout)")
	require.Contains(t, r.Stderr, "pod/web-snapshot created; waiting for it to run\n")
	_, err := kube.CoreV1().Secrets(ns).Get(ctx, vmsnapshot.SecretName("web", "s1"), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the failed snapshot's Secret: %v", err)
	// Deleted; its protection's finalizer is a controller's, which this
	// cluster does not run.
	claim, err := claims.Get(ctx, vmsnapshot.ClaimName("web", "s1", "root-disk"), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err) || claim.DeletionTimestamp != nil, "the failed snapshot's claim: %v", err)
	_, err = kube.CoreV1().Pods(ns).Get(ctx, vmsnapshot.PodName("web"), metav1.GetOptions{})
	require.True(t, apierrors.IsNotFound(err), "the snapshot pod: %v", err)

	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"snapshot", "web", "--name", "Bad_Name", "--keep", "-1"}, "--name: snapshot name \"Bad_Name\": must be 1 to 40 lower-case letters, digits and '-', starting and ending with a letter or digit\n--keep -1: must be 0 (keep all) or more"},
		{[]string{"snapshot", "delete", "web", "s9"}, `vm vms/web has no snapshot "s9" (kubectl vm snapshot list web)`},
		{[]string{"restore", "web", "s9"}, `vm vms/web has no snapshot "s9" (kubectl vm snapshot list web)`},
		{[]string{"clone", "web", "web"}, `the clone needs a name of its own, not "web"`},
		{[]string{"clone", "web", "desk", "--snapshot", "s9"}, `vm vms/web has no snapshot "s9" (kubectl vm snapshot list web)`},
	} {
		require.EqualError(t, run(tc.args...).Err, tc.err, tc.args)
	}
	r = run("snapshot", "list", "web")
	require.NoError(t, r.Err)
	require.Equal(t, "No snapshots found.\n", r.Stderr)

	// One as kubectl vm snapshot leaves it: listed, and completed.
	secret, err := vmsnapshot.NewSecret(ns, vmsnapshot.Info{VM: "web", Name: "s2", Kind: vmsnapshot.KindCopy, Phase: vmsnapshot.PhaseReady,
		Consistency: vmsnapshot.Stopped, Disks: []vmsnapshot.Disk{{Name: "root-disk", Claim: "web-snapshot-s2-root-disk", Size: 1 << 30, Block: true}}}, nil)
	require.NoError(t, err)
	_, err = kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{})
	require.NoError(t, err)
	r = run("snapshot", "list", "web")
	require.NoError(t, r.Err)
	require.Regexp(t, `^VM\s+SNAPSHOT\s+PHASE\s+KIND\s+CONSISTENCY\s+DISKS\s+SIZE\s+AGE\nweb\s+s2\s+Ready\s+copy\s+stopped\s+1\s+1024 MiB\s+\S+\n$`, r.Stdout)
	for _, args := range [][]string{{"restore", "web", ""}, {"snapshot", "delete", "web", ""}, {"clone", "web", "desk", "--snapshot", ""}} {
		r = run(append([]string{"__complete"}, args...)...)
		require.NoError(t, r.Err)
		require.Equal(t, "s2\n:4\n", r.Stdout[:len("s2\n:4\n")], args)
	}
	r = run("snapshot", "delete", "web", "s2")
	require.NoError(t, r.Err)
	require.Equal(t, "snapshot s2 of vm vms/web deleted\n", r.Stdout)
}
