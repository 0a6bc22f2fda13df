package vmstatus

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

var agentLabels = map[string]string{"app.kubernetes.io/name": "vm-node"}

// agentPod is a pod of the node agent's DaemonSet on node, changed by
// status.
func agentPod(name, node string, status func(*corev1.PodStatus)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nodeAgentNamespace, UID: types.UID(name), Labels: agentLabels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/vmop/vm-node:v1"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	if status != nil {
		status(&p.Status)
	}
	return p
}

// waiting sets the agent container waiting for reason.
func waiting(reason, msg string) func(*corev1.PodStatus) {
	return func(s *corev1.PodStatus) {
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", Image: "ghcr.io/vmop/vm-node:v1",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}}
	}
}

func ready(s *corev1.PodStatus) {
	s.Phase = corev1.PodRunning
	s.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
}

// warning is the kubelet's warning about pod.
func warning(pod *corev1.Pod, reason, msg string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: pod.Name + "." + reason, Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Type:           corev1.EventTypeWarning, Reason: reason, Message: msg, LastTimestamp: metav1.NewTime(at),
	}
}

func agentDaemonSet() *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: nodeAgentDaemonSet, Namespace: nodeAgentNamespace},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: agentLabels}},
	}
}

const mountFailed = `MountVolume.SetUp failed for volume "kubelet-pods" : hostPath type check failed, /var/lib/kubelet/pods is not a directory`

func TestWorkloadStuck(t *testing.T) {
	now := time.Now()
	mounting := agentPod("vm-node-a", "n1", nil)
	crashing := agentPod("vm-node-c", "n3", func(s *corev1.PodStatus) {
		s.Phase = corev1.PodRunning
		s.ContainerStatuses = []corev1.ContainerStatus{{Name: "agent", RestartCount: 4,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
				Message: "back-off 1m20s restarting failed container=agent pod=vm-node-c_vmop-system(c)"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
				Message: "vm-node: starting\nvm-node: listen /var/lib/kubelet/device-plugins/vmop.sock: permission denied\n"}},
		}}
	})
	unscheduled := agentPod("vm-node-d", "", func(s *corev1.PodStatus) {
		s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/2 nodes are available: 2 Insufficient memory."}}
	})
	objs := []runtime.Object{
		agentDaemonSet(),
		mounting,
		// An older warning gives way to the latest.
		warning(mounting, "FailedScheduling", "an old one", now.Add(-time.Minute)),
		warning(mounting, "FailedMount", mountFailed, now),
		agentPod("vm-node-b", "n2", waiting("ImagePullBackOff", `Back-off pulling image "ghcr.io/vmop/vm-node:v1"`)),
		crashing,
		unscheduled,
		agentPod("vm-node-e", "n4", ready),
		// Creating its container is no trouble yet.
		agentPod("vm-node-f", "n5", waiting("ContainerCreating", "")),
		// Another namespace's pod with the same labels is not the agent's.
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "default", Labels: agentLabels},
			Status: corev1.PodStatus{Phase: corev1.PodPending}},
	}
	kube := fake.NewClientset(objs...)
	lines, err := NodeAgentStuck(t.Context(), kube, "")
	require.NoError(t, err)
	require.Equal(t, []string{
		"pod vm-node-a on node n1: FailedMount: " + mountFailed +
			"; if the nodes' kubelet keeps its files elsewhere (its --root-dir), give that directory: kubectl vm install --kubelet-root-dir DIR",
		`pod vm-node-b on node n2: container agent: ImagePullBackOff: Back-off pulling image "ghcr.io/vmop/vm-node:v1"` +
			"; check that the image exists and that the node reaches its registry (a mirror: kubectl vm install --image-registry)",
		"pod vm-node-c on node n3: container agent: CrashLoopBackOff: failed 4 times, last with exit code 1: " +
			"vm-node: listen /var/lib/kubelet/device-plugins/vmop.sock: permission denied" +
			"; its log: kubectl logs -n vmop-system vm-node-c -c agent --previous",
		"pod vm-node-d: no node takes it: 0/2 nodes are available: 2 Insufficient memory.",
	}, lines)

	// The pod on one node: what it is stuck on, or that it is not ready,
	// or that there is none; nothing when it is ready.
	for node, want := range map[string][]string{
		"n1": lines[:1],
		"n3": lines[2:3],
		"n4": nil,
		"n5": {"pod vm-node-f on node n5 is not ready (Pending); kubectl describe pod -n vmop-system vm-node-f says why"},
		"n9": {"daemonset vm-node has no pod on node n9; kubectl describe daemonset -n vmop-system vm-node says why"},
	} {
		got, err := NodeAgentStuck(t.Context(), kube, node)
		require.NoError(t, err)
		require.Equal(t, want, got, node)
	}

	// Not installed.
	lines, err = NodeAgentStuck(t.Context(), fake.NewClientset(), "n1")
	require.NoError(t, err)
	require.Equal(t, []string{"namespace vmop-system has no DaemonSet vm-node: kubectl vm install (--node-agent-only where no operator runs) installs it"}, lines)
}

// TestWorkloadStuckCreate: a Deployment's pods are its ReplicaSets',
// whose FailedCreate says why there is none.
func TestWorkloadStuckCreate(t *testing.T) {
	labels := map[string]string{"app.kubernetes.io/name": "vm-operator"}
	kube := fake.NewClientset(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "rs", Namespace: nodeAgentNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "ReplicaSet", Namespace: nodeAgentNamespace, Name: "vm-operator-5bcbbbbd5c"},
		Type:           corev1.EventTypeWarning, Reason: EventFailedCreate, Message: `pods "vm-operator-5bcbbbbd5c-x" is forbidden: exceeded quota`,
	})
	lines, err := WorkloadStuck(t.Context(), kube, nodeAgentNamespace, "Deployment", "vm-operator", &metav1.LabelSelector{MatchLabels: labels})
	require.NoError(t, err)
	require.Equal(t, []string{`deployment vm-operator cannot create its pod: pods "vm-operator-5bcbbbbd5c-x" is forbidden: exceeded quota`}, lines)
}
