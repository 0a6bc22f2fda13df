package e2e

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"

	"github.com/vmop/vmop/test/harness/testcluster"
)

// scheduledVM is a VM that names no node: the scheduler places its pod on
// the node of the given kubernetes.io/hostname. It has no disk and no CD
// drive, so that its pod's only claim is the runner's data.
const scheduledVM = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: %s
spec:
  nodeSelector:
    kubernetes.io/hostname: %s
  vm:
    state: Running
    maximumCpus: 2
    maximumRam: 1Gi
%s`

// TestNodeAgent has a scheduler, and a node without vmop's node agent
// (its devices): the scheduler does not place a VM pod there, which the
// VM's status says, with what to do, until the node offers the devices.
// A VM with a tap NIC, whose runner is privileged, needs no agent.
func TestNodeAgent(t *testing.T) {
	const agentless = "node-2"
	e := newEnvWith(t, func(o *testcluster.Options) {
		o.Nodes = append(o.Nodes, agentless)
		// Binds the runner's data claims to the volumes the test creates:
		// the scheduler places no pod whose claims are unbound.
		o.MoreControllers = append(o.MoreControllers, "persistentvolume-binder-controller")
	})
	e.startScheduler()
	e.startOperator("vm-operator", "--resync=2s")
	ns := e.namespace("node-agent", nil)
	running := func(st v1.VirtualMachineStatus) bool {
		return condition(st, v1.ConditionRunning).Status == metav1.ConditionTrue
	}

	t.Run("a VM pod that no node with the agent takes sets Failed NodeAgentMissing", func(t *testing.T) {
		e.volumeFor(t, ns, "vm1")
		e.createVM(ns, fmt.Sprintf(scheduledVM, "vm1", agentless, ""))
		st := e.waitStatus(ns, "vm1", 60*time.Second, "NodeAgentMissing", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionFailed).Reason == v1.ReasonNodeAgentMissing
		})
		f := condition(st, v1.ConditionFailed)
		require.Equal(t, metav1.ConditionTrue, f.Status)
		// The scheduler's words, as the status quotes them.
		require.Regexp(t, `\(the scheduler: 0/2 nodes are available: .*1 Insufficient `+regexp.QuoteMeta(nodeagent.Resource), f.Message)
		require.Contains(t, f.Message, "kubectl vm install")
		require.Contains(t, f.Message, "kubectl get daemonset -n vmop-system vm-node")
		require.Equal(t, v1.ReasonStarting, condition(st, v1.ConditionRunning).Reason)
		require.Empty(t, st.Node)
		pod := e.pod(t, ns, render.PodName("vm1"))
		require.Empty(t, pod.Spec.NodeName, "not placed")
		q := pod.Spec.Containers[0].Resources.Limits[nodeagent.Resource]
		require.Equal(t, "1", q.String(), "the runner requests the agent's devices")

		stdout, _, err := e.plugin(t.Context(), "status", "-n", ns, "vm1")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^  Failed\s+True\s+NodeAgentMissing\s`, stdout)
	})

	t.Run("a VM with a tap NIC runs on a node without the agent", func(t *testing.T) {
		e.volumeFor(t, ns, "tap")
		e.createVM(ns, fmt.Sprintf(scheduledVM, "tap", agentless, "    networks:\n    - tap: {bridge: br0}\n"))
		st := e.waitStatus(ns, "tap", 60*time.Second, "running", running)
		require.Equal(t, agentless, st.Node)
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionFailed).Status)
		pod := e.pod(t, ns, render.PodName("tap"))
		require.True(t, pod.Spec.HostNetwork)
		require.NotContains(t, pod.Spec.Containers[0].Resources.Limits, corev1.ResourceName(nodeagent.Resource))
	})

	t.Run("the VM starts once its node has the agent", func(t *testing.T) {
		e.offerNodeAgent(agentless)
		st := e.waitStatus(ns, "vm1", 60*time.Second, "running", running)
		require.Equal(t, agentless, st.Node)
		require.Equal(t, v1.ReasonNoFailure, condition(st, v1.ConditionFailed).Reason)
		require.Equal(t, metav1.ConditionFalse, condition(st, v1.ConditionFailed).Status)
	})
}

// volumeFor creates a volume for the runner's data claim of the VM's pod,
// bound in advance to that claim as an administrator's static volume can
// be; the persistentvolume-binder controller completes the binding. The
// path is never used: no kubelet mounts it.
func (e *env) volumeFor(t *testing.T, ns, vm string) {
	claim := render.VolumeRunnerData + "-" + render.PodName(vm)
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + claim},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/nonexistent/" + ns + "/" + claim},
			},
			ClaimRef: &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: claim},
		},
	}
	_, err := e.kube.CoreV1().PersistentVolumes().Create(t.Context(), pv, metav1.CreateOptions{})
	require.NoError(t, err)
}
