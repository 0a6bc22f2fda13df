package status_test

import (
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/status"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// Golden files: testdata/status/<case>.txt; rewrite them with
// "go test ./pkg/kubectl-vm/cmd/status -update".

// run runs "kubectl vm status ARGS" against e, with e's clock.
func run(t *testing.T, e *vmtest.Env, args ...string) plugintest.Result {
	t.Helper()
	return e.Run(t, func(flags *genericclioptions.ConfigFlags, streams genericiooptions.IOStreams) *cobra.Command {
		return status.NewCmdWithClock("kubectl vm", flags, streams, e.Now)
	}, append([]string{"status"}, args...)...)
}

func TestStatus(t *testing.T) {
	e := vmtest.New(t)
	for _, tc := range []struct{ golden, namespace, vm string }{
		{"operator-running", vmtest.Namespace, vmtest.Desktop},
		{"operator-stopped", vmtest.Namespace, vmtest.Stopped},
		{"gitops-running", vmtest.Namespace, vmtest.GitOps},
		{"gitops-stopped", vmtest.OtherNamespace, vmtest.Server},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			r := run(t, e, "-n", tc.namespace, tc.vm)
			require.NoError(t, r.Err)
			require.Empty(t, r.Stderr)
			golden.Assert(t, filepath.Join("testdata", "status", tc.golden+".txt"), []byte(r.Stdout))
		})
	}

	// A GitOps VM whose ConfigMap is gone still shows what it does.
	t.Run("gitops-no-configmap", func(t *testing.T) {
		require.NoError(t, e.Kube.CoreV1().ConfigMaps(vmtest.OtherNamespace).Delete(t.Context(), vmtest.Server, metav1.DeleteOptions{}))
		r := run(t, e, "-n", vmtest.OtherNamespace, vmtest.Server)
		require.NoError(t, r.Err)
		golden.Assert(t, filepath.Join("testdata", "status", "gitops-no-configmap.txt"), []byte(r.Stdout))
	})

	// Errors come through the plugin's own root command, which also shows
	// that status is one of its commands.
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"unknown VM", []string{"-n", vmtest.Namespace, "status", "nope"},
			`virtual machine "nope" not found in namespace "vms": no VirtualMachine and no StatefulSet rendered by kubectl vm`},
		{"no name", []string{"status"}, "accepts 1 arg(s), received 0"},
		{"unreachable", []string{"--server", "https://127.0.0.1:1", "status", vmtest.Desktop},
			`cannot reach the cluster at https://127.0.0.1:1: Get "https://127.0.0.1:1/apis/vmoperator.jdrupes.org/v1/namespaces/default/vms/desktop": dial tcp 127.0.0.1:1: connect: connection refused`},
		{"forbidden", []string{"--as", "nobody", "-n", vmtest.Namespace, "status", vmtest.Desktop},
			`vms.vmoperator.jdrupes.org "desktop" is forbidden: User "nobody" cannot get resource "vms" in API group "vmoperator.jdrupes.org" in the namespace "vms"; ask a cluster administrator for that right`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := plugintest.Run(t.Context(), "", append([]string{"--kubeconfig", e.Kubeconfig}, tc.args...)...)
			require.Error(t, r.Err)
			require.Equal(t, tc.err, r.Err.Error())
			require.NotContains(t, r.Err.Error(), "\n")
			require.Empty(t, r.Stdout)
		})
	}
}

// TestNodeAgentStuck: a VM that waits for the node agent shows what
// the agent's pod is stuck on, in the kubelet's words, and what to do.
func TestNodeAgentStuck(t *testing.T) {
	e := vmtest.New(t)
	ctx := t.Context()
	const ns = "vmop-system"
	status := `{"status":{"conditions":[{"type":"Failed","status":"True","reason":"NodeAgentMissing",` +
		`"message":"No node offers the VM's pod devices.vmop.io/vm.","lastTransitionTime":"` + e.Start.UTC().Format(time.RFC3339) + `"}]}}`
	_, err := e.Dynamic.Resource(v1.GroupVersionResource).Namespace(vmtest.Namespace).Patch(ctx, vmtest.Stopped, types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status")
	require.NoError(t, err)

	// No agent installed.
	r := run(t, e, "-n", vmtest.Namespace, vmtest.Stopped)
	require.NoError(t, r.Err)
	require.Regexp(t, `(?m)^Node agent:\s+namespace vmop-system has no DaemonSet vm-node: kubectl vm install`, r.Stdout)

	// Installed, its pod stuck.
	require.NoError(t, e.CreateNamespace(ctx, ns))
	labels := map[string]string{"app.kubernetes.io/name": "vm-node"}
	_, err = e.Kube.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-node"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				// No node here matches: the test makes the pod itself.
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"none": "none"}, Containers: []corev1.Container{{Name: "agent", Image: "example.org/x"}}},
			},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	pod, err := e.Kube.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-node-x1", Labels: labels},
		Spec:       corev1.PodSpec{NodeName: "elsewhere", Containers: []corev1.Container{{Name: "agent", Image: "example.org/x"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	mount := `MountVolume.SetUp failed for volume "kubelet-pods" : hostPath type check failed, /var/lib/kubelet/pods is not a directory`
	_, err = e.Kube.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "mount"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod.Name, UID: pod.UID},
		Type:           corev1.EventTypeWarning, Reason: "FailedMount", Message: mount, LastTimestamp: metav1.Now(),
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	r = run(t, e, "-n", vmtest.Namespace, vmtest.Stopped)
	require.NoError(t, r.Err)
	require.Regexp(t, `(?m)^Status:\s+NodeAgentMissing: No node offers`, r.Stdout)
	require.Regexp(t, `(?m)^Node agent:\s+pod vm-node-x1 on node elsewhere: FailedMount: `+regexp.QuoteMeta(mount)+
		`; if the nodes' kubelet keeps its files elsewhere \(its --root-dir\), give that directory: kubectl vm install --kubelet-root-dir DIR$`, r.Stdout)

	// The VM's pod on node n2, where the agent did not answer it: only the
	// agent's pod there counts, and there is none.
	failed := `{"status":{"conditions":[{"type":"Failed","status":"True","reason":"NodeAgentFailed",` +
		`"message":"vmop's node agent did not answer within 2m0s.","lastTransitionTime":"` + e.Start.UTC().Format(time.RFC3339) + `"}]}}`
	_, err = e.Dynamic.Resource(v1.GroupVersionResource).Namespace(vmtest.Namespace).Patch(ctx, vmtest.Stopped, types.MergePatchType, []byte(failed), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	_, err = e.Kube.CoreV1().Pods(vmtest.Namespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: vmtest.Stopped + "-0"},
		Spec: corev1.PodSpec{NodeName: "n2", AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "runner", Image: "example.org/x"}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	r = run(t, e, "-n", vmtest.Namespace, vmtest.Stopped)
	require.NoError(t, r.Err)
	require.Regexp(t, `(?m)^Status:\s+NodeAgentFailed: `, r.Stdout)
	require.Regexp(t, `(?m)^Node agent:\s+daemonset vm-node has no pod on node n2; kubectl describe daemonset -n vmop-system vm-node says why$`, r.Stdout)
}

// TestHelp: the help shows how it is called, with examples.
func TestHelp(t *testing.T) {
	r := plugintest.Run(t.Context(), "", "status", "--help")
	require.NoError(t, r.Err)
	out := r.Stdout
	require.Contains(t, out, "kubectl vm status NAME [flags]")
	require.Contains(t, out, "kubectl vm status test-vm")
	require.Contains(t, out, "GitOps mode")
}
