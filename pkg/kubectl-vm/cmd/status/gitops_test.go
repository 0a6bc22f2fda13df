package status_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/status"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vmstatus"
	"github.com/vmop/vmop/test/harness/gitopsvm"
)

// exampleVM is VM-Operator's local-path example in GitOps mode.
func exampleVM(t *testing.T) (*vmclient.VM, *corev1.ConfigMap) {
	objs := gitopsvm.Example(t)
	sts := objs.StatefulSet
	return &vmclient.VM{Namespace: sts.Namespace, Name: sts.Name, Mode: vmclient.ModeGitOps, StatefulSet: sts}, objs.ConfigMap
}

// TestGitOpsPrerequisites: without an operator, kubectl vm status reads
// what keeps a rendered VM from starting as the operator would, from the
// states the scheduler, the volume controller and the StatefulSet
// controller leave.
func TestGitOpsPrerequisites(t *testing.T) {
	vm, cm := exampleVM(t)
	load := func(objs ...runtime.Object) (phase, msg string) {
		kube := fake.NewClientset(append(objs, cm)...)
		v, err := status.Load(t.Context(), &vmclient.Client{Kube: kube}, vm)
		require.NoError(t, err)
		return v.Phase()
	}

	// The account kubectl vm render --service-account names is missing.
	phase, msg := load(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "test-vm.1", Namespace: vm.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Namespace: vm.Namespace, Name: vm.Name, UID: vm.StatefulSet.UID},
		Reason:         vmstatus.EventFailedCreate, Type: corev1.EventTypeWarning,
		Message: `create Pod test-vm-0 in StatefulSet test-vm failed error: pods "test-vm-0" is forbidden: ` +
			`error looking up service account vmop-demo/vm-runner: serviceaccount "vm-runner" not found`,
	})
	require.Equal(t, v1.ReasonServiceAccountMissing, phase)
	require.Contains(t, msg, "kubectl create serviceaccount -n vmop-demo vm-runner")

	// The image repository is missing.
	phase, msg = load(gitopsvm.UnscheduledPod(vm.StatefulSet, `0/1 nodes are available: persistentvolumeclaim "vmop-image-repository" not found. not found`))
	require.Equal(t, v1.ReasonImageRepositoryMissing, phase)
	require.Contains(t, msg, "namespace vmop-demo has none")

	// No node runs the node agent, whose devices the pod requests.
	phase, msg = load(gitopsvm.UnscheduledPod(vm.StatefulSet, `0/1 nodes are available: 1 Insufficient devices.vmop.io/vm. `+
		`preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.`))
	require.Equal(t, v1.ReasonNodeAgentMissing, phase)
	require.Contains(t, msg, "kubectl vm install --node-agent-only")

	// It exists now, but no class is the default: the claims wait.
	unbound := gitopsvm.UnscheduledPod(vm.StatefulSet, `0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found`)
	pending := func(name string, class *string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: vm.Namespace},
			Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: class},
			Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
		}
	}
	noClass := ""
	phase, msg = load(unbound, pending(render.ImageRepositoryClaim, nil), pending("runner-data-test-vm-0", nil), pending("system-disk-test-vm-0", &noClass))
	require.Equal(t, v1.ReasonNoDefaultStorageClass, phase)
	require.Contains(t, msg, "Claim vmop-image-repository names no StorageClass")

	// With a default class only the example's disk waits, for a volume
	// without class.
	local := "local-dir"
	bound := pending(render.ImageRepositoryClaim, &local)
	bound.Status.Phase = corev1.ClaimBound
	phase, msg = load(unbound, bound, pending("system-disk-test-vm-0", &noClass))
	require.Equal(t, v1.ReasonClaimPending, phase)
	require.Contains(t, msg, `Claim system-disk-test-vm-0 has storageClassName ""`)
}
