package podsync_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/vmop/vmop/pkg/podsync"
)

// The fake clientset stands in for the API server here; test/e2e checks
// the annotation that the operator and kubectl vm set write in a real one.

func TestNudge(t *testing.T) {
	ctx := t.Context()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "vm-0", Namespace: "ns",
		Annotations: map[string]string{"other": "kept"},
	}}
	kube := fake.NewClientset(pod)

	t.Run("annotates the VM's pod with a merge patch", func(t *testing.T) {
		kube.ClearActions()
		ok, err := podsync.Nudge(ctx, kube.CoreV1(), "ns", "vm", podsync.AnnotationConfigVersion, "42", "test")
		require.NoError(t, err)
		require.True(t, ok)
		got, err := kube.CoreV1().Pods("ns").Get(ctx, "vm-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, map[string]string{"other": "kept", podsync.AnnotationConfigVersion: "42"}, got.Annotations)

		require.Len(t, kube.Actions(), 2)
		patch := kube.Actions()[0].(k8stesting.PatchAction)
		require.Equal(t, types.MergePatchType, patch.GetPatchType())
		require.JSONEq(t, `{"metadata":{"annotations":{"vmoperator.jdrupes.org/config-version":"42"}}}`, string(patch.GetPatch()))
	})

	t.Run("a new value replaces the old one", func(t *testing.T) {
		ok, err := podsync.Nudge(ctx, kube.CoreV1(), "ns", "vm", podsync.AnnotationConfigVersion, "43", "test")
		require.NoError(t, err)
		require.True(t, ok)
		got, err := kube.CoreV1().Pods("ns").Get(ctx, "vm-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, "43", got.Annotations[podsync.AnnotationConfigVersion])
	})

	t.Run("a VM without a pod is no error", func(t *testing.T) {
		ok, err := podsync.Nudge(ctx, kube.CoreV1(), "ns", "stopped", podsync.AnnotationConfigVersion, "1", "test")
		require.NoError(t, err)
		require.False(t, ok)
		_, err = kube.CoreV1().Pods("ns").Get(ctx, "stopped-0", metav1.GetOptions{})
		require.True(t, apierrors.IsNotFound(err), "no pod is created: %v", err)
	})

	t.Run("other errors are returned", func(t *testing.T) {
		denied := fake.NewClientset(pod)
		denied.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "vm-0", nil)
		})
		ok, err := podsync.Nudge(ctx, denied.CoreV1(), "ns", "vm", podsync.AnnotationPasswordSerial, "7", "test")
		require.True(t, apierrors.IsForbidden(err), "%v", err)
		require.False(t, ok)
	})
}
