package status

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/render"
)

// TestPodSummary: a runner restarted in its pod (killed, crashed) is
// said, with how it ended, also once it runs again.
func TestPodSummary(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-0"},
		Spec:       corev1.PodSpec{NodeName: "n1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{
			Name: render.ContainerRunner,
		}}},
	}
	require.Equal(t, "vm-0, Running, on node n1", podSummary(pod))
	cs := &pod.Status.ContainerStatuses[0]
	cs.RestartCount = 1
	cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{
		ExitCode: 137, Reason: "Error", FinishedAt: metav1.NewTime(time.Date(2026, 11, 23, 1, 2, 3, 0, time.UTC)),
	}
	require.Equal(t, "vm-0, Running, on node n1, runner restarted 1 time (last exit code 137, Error, at 2026-11-23T01:02:03Z)", podSummary(pod))
	cs.RestartCount = 3
	require.Contains(t, podSummary(pod), "runner restarted 3 times")
}
