// Package gitopsvm is a VM in GitOps mode as unit tests with a fake
// clientset need it: the objects kubectl vm render makes of the bundled
// example, and the pod the scheduler leaves unscheduled.
package gitopsvm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// Example renders VM-Operator's local-path example as "kubectl vm
// render --service-account vm-runner" does: a GitOps-mode VM's objects,
// for unit tests with a fake clientset.
func Example(t testing.TB) *render.Objects {
	t.Helper()
	root, err := testcluster.ModuleRoot()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "examples", "local-path-test-vm.yaml"))
	require.NoError(t, err)
	var vm v1.VirtualMachine
	require.NoError(t, yaml.Unmarshal(b, &vm))
	objs, err := render.Render(&vm, render.Options{ServiceAccount: "vm-runner"})
	require.NoError(t, err)
	objs.StatefulSet.UID = "sts-uid"
	return objs
}

// UnscheduledPod is the pod the StatefulSet controller makes of sts, as
// the scheduler leaves it with message.
func UnscheduledPod(sts *appsv1.StatefulSet, message string) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: render.PodName(sts.Name), Namespace: sts.Namespace, UID: "pod-uid",
			Labels: sts.Spec.Template.Labels},
		Spec: *sts.Spec.Template.Spec.DeepCopy(),
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: message,
		}}},
	}
	for _, c := range sts.Spec.VolumeClaimTemplates {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: c.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c.Name + "-" + pod.Name},
		}})
	}
	return pod
}
