package vmstatus

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// failed is the Failed condition of a running VM's pod, and whether it
// is true.
func failed(pod *corev1.Pod) (metav1.Condition, bool) {
	c := FromPod(pod, true, "").Failed
	return c, c.Status == metav1.ConditionTrue
}

func TestPodFailure(t *testing.T) {
	crashing := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name:         render.ContainerRunner,
		RestartCount: 5,
		State:        corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: 2, Message: "config: /Runner.vm.maximumRam: invalid size\n",
		}},
	}}}}
	c, ok := failed(crashing)
	require.True(t, ok)
	require.Equal(t, v1.ReasonCrashLoop, c.Reason)
	require.Equal(t, "The runner failed 5 times; last exit code 2: config: /Runner.vm.maximumRam: invalid size.", c.Message)

	refused := crashing.DeepCopy()
	refused.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: runnerconfig.ExitQemuRefused, Message: "qemu refused to start (exited with code 1): qemu-system-x86_64: unable to find CPU model 'nehalem'",
	}
	c, ok = failed(refused)
	require.True(t, ok)
	require.Equal(t, v1.ReasonQemuFailed, c.Reason)
	require.Equal(t, "qemu refused to start (exited with code 1): qemu-system-x86_64: unable to find CPU model 'nehalem' (5 restarts).", c.Message)

	noNetwork := crashing.DeepCopy()
	noNetwork.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: runnerconfig.ExitNetwork, Message: `network 0 (tap): bridge "br9" does not exist on node n1: create it there, or choose another bridge`,
	}
	c, ok = failed(noNetwork)
	require.True(t, ok)
	require.Equal(t, v1.ReasonNetworkFailed, c.Reason)
	require.Equal(t, `network 0 (tap): bridge "br9" does not exist on node n1: create it there, or choose another bridge (5 restarts).`, c.Message)

	// Right after the exit, before the kubelet's back-off.
	justExited := refused.DeepCopy()
	cs := &justExited.Status.ContainerStatuses[0]
	cs.State = corev1.ContainerState{Terminated: cs.LastTerminationState.Terminated}
	cs.LastTerminationState = corev1.ContainerState{}
	c, ok = failed(justExited)
	require.True(t, ok)
	require.Equal(t, v1.ReasonQemuFailed, c.Reason)

	// Between back-offs the runner runs for a moment: until its VM runs
	// (the readiness probe), it still fails; then it has recovered.
	retrying := refused.DeepCopy()
	cs = &retrying.Status.ContainerStatuses[0]
	cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	c, ok = failed(retrying)
	require.True(t, ok)
	require.Equal(t, v1.ReasonQemuFailed, c.Reason)
	cs.Ready = true
	_, ok = failed(retrying)
	require.False(t, ok, "the VM runs again")
	cleanRestart := retrying.DeepCopy()
	cs = &cleanRestart.Status.ContainerStatuses[0]
	cs.Ready = false
	cs.LastTerminationState.Terminated.ExitCode = runnerconfig.ExitClean
	_, ok = failed(cleanRestart)
	require.False(t, ok, "a runner that ended cleanly (the guest shut down) and starts again is no failure")

	unschedulable := &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 3 Insufficient memory.",
	}}}}
	c, ok = failed(unschedulable)
	require.True(t, ok)
	require.Equal(t, v1.ReasonUnschedulable, c.Reason)
	require.Contains(t, c.Message, "Insufficient memory")

	pulling := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: render.ContainerRunner, Image: "registry.invalid/vm-runner:1",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ImagePullBackOff", Message: `Back-off pulling image "registry.invalid/vm-runner:1"`,
		}},
	}}}}
	c, ok = failed(pulling)
	require.True(t, ok)
	require.Equal(t, v1.ReasonImagePull, c.Reason)
	require.Equal(t, `The node cannot pull the runner image registry.invalid/vm-runner:1 (ImagePullBackOff): Back-off pulling image "registry.invalid/vm-runner:1"`, c.Message)

	noConfig := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: render.ContainerRunner,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "CreateContainerConfigError", Message: `configmap "vm" not found`,
		}},
	}}}}
	c, ok = failed(noConfig)
	require.True(t, ok)
	require.Equal(t, v1.ReasonContainerCreate, c.Reason)
	require.Contains(t, c.Message, `configmap "vm" not found`)

	starting := &corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name:  render.ContainerRunner,
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}},
	}}}}
	_, ok = failed(starting)
	require.False(t, ok)
}

func TestFromPod(t *testing.T) {
	c := FromPod(nil, true, "h")
	require.Equal(t, v1.ReasonStarting, c.Running.Reason)
	require.Equal(t, metav1.ConditionFalse, c.RestartRequired.Status)
	require.Equal(t, v1.ReasonStopped, FromPod(nil, false, "h").Running.Reason)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{render.AnnotationRestartHash: "old"}},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue},
		}},
	}
	c = FromPod(pod, true, "new")
	require.Equal(t, metav1.ConditionTrue, c.Running.Status)
	require.Equal(t, "The runner pod runs on n1.", c.Running.Message)
	require.Equal(t, metav1.ConditionTrue, c.Ready.Status)
	require.Equal(t, metav1.ConditionTrue, c.RestartRequired.Status, "the pod's template is older")
	require.Equal(t, metav1.ConditionFalse, FromPod(pod, true, "old").RestartRequired.Status)
	require.Equal(t, metav1.ConditionFalse, FromPod(pod, true, "").RestartRequired.Status, "unknown hash: no claim")

	pod.DeletionTimestamp = &metav1.Time{}
	require.Equal(t, v1.ReasonStopping, FromPod(pod, false, "old").Running.Reason)
	require.Len(t, FromPod(pod, false, "old").List(), 4)
}

// TestImportFailure: the import init container's failure is the VM's,
// while it waits in back-off and while it runs again; a success or a
// first run is none, and the running import shows in Running.
func TestImportFailure(t *testing.T) {
	const words = "disk system-disk: http://h/a.qcow2: checksum mismatch: want sha256:00, got sha256:11"
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{
		Name:                 render.ContainerImport,
		RestartCount:         2,
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: runnerconfig.ExitImport, Message: words + "\n"}},
	}}}}
	c, ok := failed(pod)
	require.True(t, ok)
	require.Equal(t, v1.ReasonImportFailed, c.Reason)
	require.Equal(t, words+" (2 restarts).", c.Message)

	cs := &pod.Status.InitContainerStatuses[0]
	cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	c, ok = failed(pod)
	require.True(t, ok, "running again after a failure")
	require.Equal(t, v1.ReasonImportFailed, c.Reason)
	require.Equal(t, v1.ReasonStarting, FromPod(pod, true, "").Running.Reason)
	require.Contains(t, FromPod(pod, true, "").Running.Message, "fills the VM's disks")

	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: runnerconfig.ExitImport}}
	c, ok = failed(pod)
	require.True(t, ok, "just exited")
	require.Equal(t, "init container import exited with 7 (2 restarts).", c.Message)

	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	_, ok = failed(pod)
	require.False(t, ok, "imported")

	first := &corev1.Pod{Status: corev1.PodStatus{InitContainerStatuses: []corev1.ContainerStatus{{
		Name: render.ContainerImport, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
	}}}}
	_, ok = failed(first)
	require.False(t, ok, "a first import")
}

// TestContainerDiskFailure: a containerDisk image the node cannot pull,
// and one that is not a containerDisk, are the VM's failures; its copy
// running shows in Running.
func TestContainerDiskFailure(t *testing.T) {
	const image = "registry.example/disks/debian:13"
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
		{Name: render.ContainerImportBin, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		{Name: render.ContainerFetch + "0", Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ImagePullBackOff", Message: `Back-off pulling image "` + image + `"`,
		}}},
		{Name: render.ContainerImport, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}},
	}}}
	c, ok := failed(pod)
	require.True(t, ok)
	require.Equal(t, v1.ReasonImagePull, c.Reason)
	require.Equal(t, "The node cannot pull the image "+image+" of init container fetch-0 (ImagePullBackOff): Back-off pulling image \""+image+"\"", c.Message)

	cs := &pod.Status.InitContainerStatuses[1]
	cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	_, ok = failed(pod)
	require.False(t, ok, "pulled and copying")
	require.Equal(t, "The pod copies a disk out of its containerDisk image "+image+".", FromPod(pod, true, "").Running.Message)

	const words = "disk system-disk: the image's /disk is empty: not a containerDisk image"
	cs.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Message: words}}
	c, ok = failed(pod)
	require.True(t, ok)
	require.Equal(t, v1.ReasonImportFailed, c.Reason)
	require.Equal(t, words+" (0 restarts).", c.Message)
}
