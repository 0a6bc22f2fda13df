package podexec

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
)

func TestRunningPod(t *testing.T) {
	vm := &vmclient.VM{Namespace: "ns", Name: "web"}
	runner := func(s corev1.ContainerState) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: render.PodName("web")},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
				{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{Name: render.ContainerRunner, State: s},
			}},
		}
	}
	deleting := runner(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	deleting.DeletionTimestamp = &metav1.Time{}
	pending := runner(corev1.ContainerState{})
	pending.Status.Phase, pending.Status.ContainerStatuses = corev1.PodPending, nil

	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		wantErr string
	}{
		{"running", runner(corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}), ""},
		{"no pod", nil, "vm ns/web is not running: it has no pod"},
		{"deleted", deleting, "vm ns/web is stopping: its pod web-0 is being deleted"},
		{"pulling", runner(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling image \"x\"\nmore"}}),
			`vm ns/web is not running: its runner container is waiting (ImagePullBackOff: Back-off pulling image "x")`},
		{"crashed", runner(corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error"}}),
			"vm ns/web is not running: its runner container terminated (Error)"},
		{"not scheduled", pending, "vm ns/web is not running: its pod web-0 is Pending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset()
			if tc.pod != nil {
				kube = fake.NewClientset(tc.pod)
			}
			pod, err := RunningPod(context.Background(), &vmclient.Client{Kube: kube, Namespace: "ns"}, vm)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, render.PodName("web"), pod.Name)
		})
	}
}

// TestUpgradeRefused: the error client-go's WebSocket transport returns when
// the upgrade is refused leads to the SPDY fallback; other errors do not.
func TestUpgradeRefused(t *testing.T) {
	require.True(t, UpgradeRefused(fmt.Errorf("exec: %w", &httpstream.UpgradeFailureError{Cause: errors.New("403")})))
	require.True(t, UpgradeRefused(errors.New("proxy: unknown scheme: https")))
	require.False(t, UpgradeRefused(errors.New("connection refused")))
}
