package status_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/status"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/gitopsvm"
)

// TestNodeAgentOnTheVMsNode: a VM whose runner is not ready on its node
// may wait for the node agent there, so status says what the agent's pod
// on that node is stuck on, and nothing while it is ready, or while the
// runner is.
func TestNodeAgentOnTheVMsNode(t *testing.T) {
	vm, cm := exampleVM(t)
	const ns = "vmop-system"
	labels := map[string]string{"app.kubernetes.io/name": "vm-node"}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-node", Namespace: ns},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}},
	}
	agent := func(node string, status corev1.PodStatus) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "vm-node-" + node, Namespace: ns, UID: types.UID("agent-" + node), Labels: labels},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     status,
		}
	}
	crashing := corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "agent", RestartCount: 2,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
			Message: "vm-node: no /dev/kvm"}},
	}}}
	ready := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	// The VM's pod runs on n1; its runner waits, not ready.
	vmPod := func(runnerReady bool) *corev1.Pod {
		pod := gitopsvm.UnscheduledPod(vm.StatefulSet, "")
		pod.Spec.NodeName = "n1"
		pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: render.ContainerRunner, Ready: runnerReady, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}}}
		return pod
	}
	load := func(kube *fake.Clientset) *status.View {
		v, err := status.Load(t.Context(), &vmclient.Client{Kube: kube}, vm)
		require.NoError(t, err)
		return v
	}

	v := load(fake.NewClientset(cm, vmPod(false), ds, agent("n1", crashing), agent("n2", ready)))
	require.NoError(t, v.NodeAgentErr)
	require.Equal(t, []string{"pod vm-node-n1 on node n1: container agent: CrashLoopBackOff: failed 2 times, last with exit code 1: " +
		"vm-node: no /dev/kvm; its log: kubectl logs -n vmop-system vm-node-n1 -c agent --previous"}, v.NodeAgent)

	for what, objs := range map[string][]runtime.Object{
		"the agent's pod on n1 is ready": {vmPod(false), ds, agent("n1", ready), agent("n2", crashing)},
		"the runner is ready":            {vmPod(true), ds, agent("n1", crashing)},
	} {
		v := load(fake.NewClientset(append(objs, cm)...))
		require.NoError(t, v.NodeAgentErr, what)
		require.Nil(t, v.NodeAgent, what)
	}

	// Whoever may not read the agent's namespace sees the VM as before:
	// its runner may wait for anything.
	kube := fake.NewClientset(cm, vmPod(false), ds, agent("n1", crashing))
	kube.PrependReactor("get", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "vm-node", nil)
	})
	v = load(kube)
	require.NoError(t, v.NodeAgentErr)
	require.Nil(t, v.NodeAgent)
}
