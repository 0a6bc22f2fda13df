package vmstatus

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

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

	refusedByAgent := crashing.DeepCopy()
	refusedByAgent.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: runnerconfig.ExitNodeAgent, Message: "the node agent: refused: the process that asks runs as uid 0, not the runner's 107",
	}
	c, ok = failed(refusedByAgent)
	require.True(t, ok)
	require.Equal(t, v1.ReasonNodeAgentFailed, c.Reason)
	require.Equal(t, "the node agent: refused: the process that asks runs as uid 0, not the runner's 107 (5 restarts).", c.Message)

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

// waitingPod is the pod of VM-Operator's example VM (a CD drive, a
// system disk, the runner's data) as the scheduler leaves it with
// message; its volumes are those the StatefulSet controller gives it.
func waitingPod(message string) *corev1.Pod {
	claim := func(name string) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name},
		}}
	}
	repo := claim(render.VolumeImageRepository)
	repo.PersistentVolumeClaim.ClaimName = render.ImageRepositoryClaim
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "test-vm-0", Namespace: "vmop-demo"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: render.VolumeConfig, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
			repo, claim("runner-data-test-vm-0"), claim("system-disk-test-vm-0"),
		}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
		}}},
	}
}

// The scheduler's words (kube-scheduler 1.37 on the test node, one node;
// the trailing "not found" is its preemption's) for a pod whose
// claims stop it in PreFilter.
const (
	schedRepositoryNotFound = `0/1 nodes are available: persistentvolumeclaim "vmop-image-repository" not found. not found`
	schedUnbound            = `0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found`
)

func TestImageRepositoryMissing(t *testing.T) {
	c, ok := failed(waitingPod(schedRepositoryNotFound))
	require.True(t, ok)
	require.Equal(t, v1.ReasonImageRepositoryMissing, c.Reason)
	require.Equal(t, "The VM has a CD drive, so its pod mounts the namespace's image repository, the PersistentVolumeClaim vmop-image-repository, "+
		"and namespace vmop-demo has none. Create it, even for an empty drive (media are inserted into a running VM from it): see "+DocsStorage, c.Message)
	require.Nil(t, WaitingClaims(waitingPod(schedRepositoryNotFound)), "the claim is missing, not unbound")

	// Another claim that is missing is not the repository.
	c, ok = failed(waitingPod(`0/1 nodes are available: persistentvolumeclaim "data" not found. not found`))
	require.True(t, ok)
	require.Equal(t, v1.ReasonUnschedulable, c.Reason)
}

// schedNoAgent is the scheduler's words (its form for a resource that no
// node has) for a VM pod where no node runs the node agent.
const schedNoAgent = `0/2 nodes are available: 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }, ` +
	`1 Insufficient devices.vmop.io/vm. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, ` +
	`1 Preemption is not helpful for scheduling.`

func TestNodeAgentMissing(t *testing.T) {
	c, ok := failed(waitingPod(schedNoAgent))
	require.True(t, ok)
	require.Equal(t, v1.ReasonNodeAgentMissing, c.Reason)
	require.Equal(t, "No node offers the VM's pod devices.vmop.io/vm, the devices of vmop's node agent (the scheduler: "+schedNoAgent+"). "+
		"Install the node agent with kubectl vm install (kubectl vm install --node-agent-only where no operator runs, e.g. GitOps), "+
		"and check that its DaemonSet vm-node in namespace vmop-system is ready on the VM's node: kubectl get daemonset -n vmop-system vm-node", c.Message)
	require.Nil(t, WaitingClaims(waitingPod(schedNoAgent)), "the scheduler waits for no claim")

	// The claims' explanation, which replaces only the scheduler's
	// words, keeps it.
	conds := FromPod(waitingPod(schedNoAgent), true, "")
	conds.ExplainClaims([]Claim{{PersistentVolumeClaim: corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "runner-data-test-vm-0"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}}})
	require.Equal(t, v1.ReasonNodeAgentMissing, conds.Failed.Reason)

	// Another resource that no node has is the scheduler's words.
	c, ok = failed(waitingPod("0/1 nodes are available: 1 Insufficient cpu."))
	require.True(t, ok)
	require.Equal(t, v1.ReasonUnschedulable, c.Reason)
	require.Equal(t, "0/1 nodes are available: 1 Insufficient cpu.", c.Message)
}

func TestExplainClaims(t *testing.T) {
	pod := waitingPod(schedUnbound)
	require.Equal(t, []string{render.ImageRepositoryClaim, "runner-data-test-vm-0", "system-disk-test-vm-0"}, WaitingClaims(pod))
	require.Nil(t, WaitingClaims(waitingPod("0/1 nodes are available: 1 Insufficient cpu.")), "the scheduler waits for no claim")
	require.Nil(t, WaitingClaims(nil))

	immediate := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "rook-cephfs"}, Provisioner: "rook-ceph.cephfs.csi.ceph.com"}
	late := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local-block"}, Provisioner: "kubernetes.io/no-provisioner",
		VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer)}
	claim := func(name string, class *string, phase corev1.PersistentVolumeClaimPhase) Claim {
		return Claim{PersistentVolumeClaim: corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "vmop-demo"},
			Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: class},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: phase},
		}}
	}
	of := func(c Claim, sc *storagev1.StorageClass) Claim {
		c.Spec.StorageClassName, c.Class = &sc.Name, sc
		return c
	}
	explain := func(claims ...Claim) metav1.Condition {
		c := FromPod(pod, true, "")
		c.ExplainClaims(claims)
		require.Equal(t, metav1.ConditionTrue, c.Failed.Status)
		return c.Failed
	}
	// VM-Operator's example disk waits for its node, as it should.
	system := of(claim("system-disk-test-vm-0", nil, corev1.ClaimPending), late)

	// No default class: admission left the runner's data without one.
	c := explain(system, claim("runner-data-test-vm-0", nil, corev1.ClaimPending))
	require.Equal(t, v1.ReasonNoDefaultStorageClass, c.Reason)
	require.Equal(t, `Claim runner-data-test-vm-0 names no StorageClass and the cluster has no default one, so nothing binds it. `+
		`Mark a StorageClass as the default (annotation storageclass.kubernetes.io/is-default-class: "true"), `+
		`or on a single node without a storage provisioner apply examples/single-node/storage.yaml: see `+DocsStorage, c.Message)

	// Just made: the volume controller has not set its phase yet.
	c = explain(system, claim(render.ImageRepositoryClaim, nil, ""))
	require.Equal(t, v1.ReasonNoDefaultStorageClass, c.Reason)

	// The class of the beta annotation counts as the claim's.
	beta := claim("runner-data-test-vm-0", nil, corev1.ClaimPending)
	beta.Annotations = map[string]string{corev1.BetaStorageClassAnnotation: "fast"}
	c = explain(beta)
	require.Equal(t, v1.ReasonClaimPending, c.Reason)
	require.Equal(t, "Claim runner-data-test-vm-0 names StorageClass fast, which does not exist. "+
		"Create the class, or name one of kubectl get storageclass: see "+DocsStorage, c.Message)

	// A disk without a class, and no volume matches.
	c = explain(claim("system-disk-test-vm-0", ptr.To(""), corev1.ClaimPending))
	require.Equal(t, v1.ReasonClaimPending, c.Reason)
	require.Equal(t, `Claim system-disk-test-vm-0 has storageClassName "", so only a PersistentVolume without a class binds it, and none that matches it `+
		`(size, access mode, volume mode, selector) is available. Create one: see `+DocsStorage, c.Message)

	c = explain(system, of(claim(render.ImageRepositoryClaim, nil, corev1.ClaimPending), immediate))
	require.Equal(t, v1.ReasonClaimPending, c.Reason)
	require.Equal(t, "Claim vmop-image-repository of StorageClass rook-cephfs is not bound. Check that the class's provisioner "+
		"(rook-ceph.cephfs.csi.ceph.com) runs: kubectl describe pvc -n vmop-demo vmop-image-repository: see "+DocsStorage, c.Message)

	// Bound since the scheduler's try (a provisioner was quick), waiting
	// for a node, or of a class the user may not read: the scheduler's
	// words stand until it tries again.
	unknown := claim("runner-data-test-vm-0", ptr.To("secret-class"), corev1.ClaimPending)
	unknown.ClassUnknown = true
	c = explain(claim("runner-data-test-vm-0", nil, corev1.ClaimBound), system, unknown)
	require.Equal(t, v1.ReasonUnschedulable, c.Reason)
	require.Equal(t, schedUnbound, c.Message)

	// Another failure is not the claims'.
	pulling := FromPod(&corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: render.ContainerRunner, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}},
	}}}}, true, "")
	pulling.ExplainClaims([]Claim{claim("runner-data-test-vm-0", nil, corev1.ClaimPending)})
	require.Equal(t, v1.ReasonImagePull, pulling.Failed.Reason)
}

func TestClaims(t *testing.T) {
	pod := waitingPod(schedUnbound)
	pvc := func(ns, name string, class *string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: class}}
	}
	local := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "local-dir"}}
	kube := fake.NewClientset(local,
		pvc("vmop-demo", "runner-data-test-vm-0", ptr.To("local-dir")),
		pvc("vmop-demo", "system-disk-test-vm-0", ptr.To("gone")),
		pvc("other", "system-disk-test-vm-0", nil),
	)
	claims, err := Claims(t.Context(), kube, pod)
	require.NoError(t, err)
	require.Len(t, claims, 2, "the repository does not exist")
	require.Equal(t, "runner-data-test-vm-0", claims[0].Name)
	require.Equal(t, local, claims[0].Class)
	require.Equal(t, "system-disk-test-vm-0", claims[1].Name)
	require.Equal(t, "vmop-demo", claims[1].Namespace)
	require.Nil(t, claims[1].Class, "the class does not exist")
	require.False(t, claims[1].ClassUnknown)

	// A user who may not read classes still learns of the claims.
	kube.PrependReactor("get", "storageclasses", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(storagev1.Resource("storageclasses"), "local-dir", errors.New("no"))
	})
	claims, err = Claims(t.Context(), kube, pod)
	require.NoError(t, err)
	require.True(t, claims[0].ClassUnknown)
	kube.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcdserver: request timed out")
	})
	_, err = Claims(t.Context(), kube, pod)
	require.EqualError(t, err, "claim vmop-demo/vmop-image-repository of pod test-vm-0: etcdserver: request timed out")

	claims, err = Claims(t.Context(), kube, waitingPod("0/1 nodes are available: 1 Insufficient cpu."))
	require.NoError(t, err)
	require.Empty(t, claims, "nothing read when the scheduler waits for no claim")
}

func TestCreateFailed(t *testing.T) {
	event := func(reason, kind, msg string, at int64) corev1.Event {
		return corev1.Event{
			Reason: reason, Message: msg, Type: corev1.EventTypeWarning,
			InvolvedObject: corev1.ObjectReference{Kind: kind, Namespace: "gitops", Name: "guest"},
			LastTimestamp:  metav1.Unix(at, 0),
		}
	}
	_, ok := CreateFailed(nil)
	require.False(t, ok)
	_, ok = CreateFailed([]corev1.Event{event("FailedScheduling", "Pod", "0/1 nodes are available", 1)})
	require.False(t, ok, "no FailedCreate")

	// The StatefulSet controller's words when the ServiceAccount that
	// kubectl vm render --service-account named does not exist.
	noAccount := event(EventFailedCreate, "StatefulSet", `create Pod guest-0 in StatefulSet guest failed error: pods "guest-0" is forbidden: `+
		`error looking up service account gitops/vm-runner: serviceaccount "vm-runner" not found`, 2)
	quota := event(EventFailedCreate, "StatefulSet", `create Pod guest-0 in StatefulSet guest failed error: pods "guest-0" is forbidden: `+
		`exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=0, limited: requests.cpu=500m`, 1)
	c, ok := CreateFailed([]corev1.Event{noAccount, quota})
	require.True(t, ok)
	require.Equal(t, v1.ReasonServiceAccountMissing, c.Reason)
	require.Equal(t, "The pod runs as ServiceAccount vm-runner, which namespace gitops lacks. Create it and bind it to the ClusterRole vm-runner "+
		"(kubectl create serviceaccount -n gitops vm-runner; kubectl create rolebinding -n gitops vm-runner --clusterrole vm-runner --serviceaccount gitops:vm-runner), "+
		"or render the VM without --service-account: see "+DocsGitOps, c.Message)

	// The latest counts: the account was made, then a quota refused.
	quota.LastTimestamp = metav1.Unix(3, 0)
	c, ok = CreateFailed([]corev1.Event{noAccount, quota})
	require.True(t, ok)
	require.Equal(t, v1.ReasonPodCreateFailed, c.Reason)
	require.Equal(t, quota.Message, c.Message)
}
