package install_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/vmop/vmop/pkg/kubectl-vm/app"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testcluster"
)

var applied = []string{
	"customresourcedefinition.apiextensions.k8s.io/vms.vmoperator.jdrupes.org",
	"namespace/vmop-system",
	"serviceaccount/vm-operator",
	"clusterrole.rbac.authorization.k8s.io/vm-operator",
	"clusterrolebinding.rbac.authorization.k8s.io/vm-operator",
	"role.rbac.authorization.k8s.io/vm-operator-leader-election",
	"rolebinding.rbac.authorization.k8s.io/vm-operator-leader-election",
	"clusterrole.rbac.authorization.k8s.io/vm-runner",
	"clusterrole.rbac.authorization.k8s.io/vm-user",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-user",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-user",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-runner-own-vm",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-runner-own-vm",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-node-devices",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-node-devices",
	"serviceaccount/vm-node",
	"clusterrole.rbac.authorization.k8s.io/vm-node",
	"clusterrolebinding.rbac.authorization.k8s.io/vm-node",
	"daemonset.apps/vm-node",
	"deployment.apps/vm-operator",
}

// TestInstallOnAPIServer installs into a real kube-apiserver, twice.
func TestInstallOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	kubectl := []string{"--kubeconfig", c.Kubeconfig, "--cache-dir", t.TempDir()}
	var want strings.Builder
	for _, ref := range applied {
		fmt.Fprintf(&want, "%s serverside-applied\n", ref)
	}

	// Someone without rights learns which object was refused and why.
	r := run(t, append(kubectl, "--as", "someone", "install")...)
	require.Error(t, r.Err)
	require.Regexp(t, `^get namespace/vmop-system: .*forbidden: User "someone" cannot get resource "namespaces" .*: this needs cluster-admin-like rights`, r.Err.Error())

	for range 2 { // the second run changes nothing and succeeds as well
		r := run(t, append(kubectl, "install", "--image", testImage)...)
		require.NoError(t, r.Err, r.Stderr)
		require.Equal(t, want.String(), r.Stdout)
	}

	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, obj := range docs(t, run(t, "install", "--dry-run", "--image", testImage).Stdout) {
		u := unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err)
		got, err := dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
		require.NoError(t, err, "%s %s", u.GetKind(), u.GetName())
		require.True(t, slices.ContainsFunc(got.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool {
			return f.Manager == "kubectl-vm" && f.Operation == metav1.ManagedFieldsOperationApply
		}), "%s %s is applied by kubectl-vm", u.GetKind(), u.GetName())
		if u.GetKind() == "CustomResourceDefinition" {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			require.True(t, slices.ContainsFunc(conds, func(c any) bool {
				m := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			}), "the CRD is established: %v", conds)
		}
	}

	// No controller manager runs, so the Deployment never becomes
	// available by itself.
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "deployment.apps/vm-operator is not available yet, giving up (see --timeout)")
	require.Equal(t, want.String(), r.Stdout)

	// What the Deployment controller would write once the pod is ready.
	deployments := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace("vmop-system")
	d, err := deployments.Get(ctx, "vm-operator", metav1.GetOptions{})
	require.NoError(t, err)
	status := fmt.Sprintf(`{"status":{"observedGeneration":%d,"replicas":1,"updatedReplicas":1,"readyReplicas":1,"availableReplicas":1}}`, d.GetGeneration())
	_, err = deployments.Patch(ctx, "vm-operator", types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status")
	require.NoError(t, err)

	// Then the node agent: not counted by a DaemonSet controller yet,
	// then ready on one node of two, then on both.
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "daemonset.apps/vm-node is not ready yet (the DaemonSet controller has not counted its nodes), giving up (see --timeout)")
	require.Equal(t, want.String()+"deployment.apps/vm-operator available\n", r.Stdout)
	daemonSets := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}).Namespace("vmop-system")
	ds, err := daemonSets.Get(ctx, "vm-node", metav1.GetOptions{})
	require.NoError(t, err)
	dsStatus := func(available int) []byte {
		return fmt.Appendf(nil, `{"status":{"observedGeneration":%d,"desiredNumberScheduled":2,"currentNumberScheduled":2,"numberMisscheduled":0,`+
			`"updatedNumberScheduled":2,"numberReady":%[2]d,"numberAvailable":%[2]d}}`, ds.GetGeneration(), available)
	}
	_, err = daemonSets.Patch(ctx, "vm-node", types.MergePatchType, dsStatus(1), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "daemonset.apps/vm-node is not ready on every node yet (1 of 2 nodes not ready), giving up (see --timeout)")
	testWaitSaysWhy(t, c, append(kubectl, "install", "--image", testImage, "--wait")...)
	_, err = daemonSets.Patch(ctx, "vm-node", types.MergePatchType, dsStatus(2), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait")...)
	require.NoError(t, r.Err)
	require.Equal(t, want.String()+"deployment.apps/vm-operator available\ndaemonset.apps/vm-node ready on 2 nodes\n", r.Stdout)

	// The node agent alone waits for the DaemonSet alone.
	r = run(t, append(kubectl, "install", "--node-agent-only", "--wait")...)
	require.NoError(t, r.Err)
	require.Equal(t, "namespace/vmop-system serverside-applied\n"+
		"validatingadmissionpolicy.admissionregistration.k8s.io/vm-node-devices serverside-applied\n"+
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-node-devices serverside-applied\n"+
		"serviceaccount/vm-node serverside-applied\n"+
		"clusterrole.rbac.authorization.k8s.io/vm-node serverside-applied\n"+
		"clusterrolebinding.rbac.authorization.k8s.io/vm-node serverside-applied\n"+
		"daemonset.apps/vm-node serverside-applied\n"+
		"daemonset.apps/vm-node ready on 2 nodes\n", r.Stdout)
}

// testWaitSaysWhy: the node agent's pod on n1 cannot mount the kubelet's
// pod directory, which that node keeps elsewhere, and the one on n2
// crashes. No kubelet runs here: the test writes what one would, in its
// words. install --wait (args) says why, and what to do, while it waits,
// long before its timeout, and ends with it.
func testWaitSaysWhy(t *testing.T, c *testcluster.Cluster, args ...string) {
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	const ns = "vmop-system"
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, "vm-node", metav1.GetOptions{})
	require.NoError(t, err)
	pod := func(name, node string) *corev1.Pod {
		p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: ds.Spec.Selector.MatchLabels},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: "vm-node", AutomountServiceAccountToken: new(false),
				Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/vmop/vm-node:v0.0.0-test"}}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.CoreV1().Pods(ns).Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
		return p
	}
	mounting := pod("vm-node-x1", "n1")
	const mount = `MountVolume.SetUp failed for volume "kubelet-pods" : hostPath type check failed, /var/lib/kubelet/pods is not a directory, ` +
		`unable to determine its type: path "/var/lib/kubelet/pods" does not exist`
	_, err = cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "vm-node-x1.mount"},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: mounting.Name, UID: mounting.UID},
		Type:           corev1.EventTypeWarning, Reason: "FailedMount", Message: mount, LastTimestamp: metav1.Now(),
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	crashing := pod("vm-node-x2", "n2")
	crashing.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "agent", RestartCount: 3,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: "back-off 40s restarting failed container=agent pod=vm-node-x2_vmop-system(uid)"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
			Message: "vm-node: cannot reach the API server: connection refused\n"}},
	}}}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, crashing, metav1.UpdateOptions{})
	require.NoError(t, err)

	const timeout = 10 * time.Second
	var out syncbuffer.Buffer
	done := make(chan error, 1)
	go func() {
		cmd := app.NewCmd("kubectl vm", genericiooptions.IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &out})
		cmd.SetArgs(append(args, "--timeout", timeout.String()))
		done <- cmd.ExecuteContext(ctx)
	}()
	why := []string{
		"pod vm-node-x1 on node n1: FailedMount: " + mount +
			"; if the nodes' kubelet keeps its files elsewhere (its --root-dir), give that directory: kubectl vm install --kubelet-root-dir DIR",
		"pod vm-node-x2 on node n2: container agent: CrashLoopBackOff: failed 3 times, last with exit code 1: " +
			"vm-node: cannot reach the API server: connection refused; its log: kubectl logs -n vmop-system vm-node-x2 -c agent --previous",
	}
	require.Eventually(t, func() bool {
		return strings.Contains(out.String(), "daemonset.apps/vm-node waits: "+why[0]+"\n"+"daemonset.apps/vm-node waits: "+why[1]+"\n")
	}, timeout/2, 50*time.Millisecond, "while it waits, install --wait says why:\n%s", &out)
	select {
	case err := <-done:
		t.Fatalf("install --wait ended before it said why: %v", err)
	default:
	}
	err = <-done
	require.EqualError(t, err, "daemonset.apps/vm-node is not ready on every node yet (1 of 2 nodes not ready), giving up (see --timeout): "+
		strings.Join(why, "; "))
	require.Equal(t, 1, strings.Count(out.String(), why[0]), "once each:\n%s", &out)
}
