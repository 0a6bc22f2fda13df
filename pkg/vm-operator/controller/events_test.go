package controller

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/vmstatus"
)

// TestEventsFollowConditions pins which status changes make which events:
// one per change, none when nothing changed.
func TestEventsFollowConditions(t *testing.T) {
	status := func(running, restart, failed metav1.Condition) opStatus {
		return opStatus{Conditions: []metav1.Condition{running, restart, failed}}
	}
	cond := vmstatus.Condition
	starting := cond(v1.ConditionRunning, false, v1.ReasonStarting, "Waiting for the runner pod.")
	running := cond(v1.ConditionRunning, true, v1.ReasonRunning, "The runner pod runs on n1.")
	upToDate := cond(v1.ConditionRestartRequired, false, v1.ReasonUpToDate, "")
	pending := cond(v1.ConditionRestartRequired, true, v1.ReasonRestartPending, "stop and start the VM to apply it.")
	ok := cond(v1.ConditionFailed, false, v1.ReasonNoFailure, "")
	crash := cond(v1.ConditionFailed, true, v1.ReasonCrashLoop, "The runner failed 3 times.")
	crash4 := cond(v1.ConditionFailed, true, v1.ReasonCrashLoop, "The runner failed 4 times.")
	refused := cond(v1.ConditionFailed, true, v1.ReasonApplyFailed, "forbidden")

	for _, tc := range []struct {
		name          string
		before, after opStatus
		want          []string
	}{
		{"first report", opStatus{}, status(starting, upToDate, ok), []string{"Normal Starting Waiting for the runner pod."}},
		{"nothing changed", status(running, upToDate, ok), status(running, upToDate, ok), nil},
		{"started", status(starting, upToDate, ok), status(running, upToDate, ok), []string{"Normal Started The runner pod runs on n1."}},
		{"restart required once", status(running, upToDate, ok), status(running, pending, ok), []string{"Normal RestartRequired stop and start the VM to apply it."}},
		{"still required", status(running, pending, ok), status(running, pending, ok), nil},
		{"fails", status(running, upToDate, ok), status(starting, upToDate, crash), []string{
			"Normal Starting Waiting for the runner pod.", "Warning RunnerCrashLoop The runner failed 3 times."}},
		{"fails anew", status(starting, upToDate, crash), status(starting, upToDate, crash4), []string{"Warning RunnerCrashLoop The runner failed 4 times."}},
		{"refused", status(starting, upToDate, ok), status(starting, upToDate, refused), []string{"Warning ApplyFailed forbidden"}},
		{"refused again", status(starting, upToDate, refused), status(starting, upToDate, refused), nil},
		{"recovers", status(starting, upToDate, refused), status(running, upToDate, ok), []string{
			"Normal Started The runner pod runs on n1.", "Normal Recovered The VM no longer fails (was ApplyFailed: forbidden)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(10)
			c := &Controller{events: rec}
			c.recordTransitions(testVM(t, "vm"), tc.before, tc.after)
			close(rec.Events)
			var got []string
			for e := range rec.Events {
				got = append(got, e)
			}
			require.Equal(t, tc.want, got)
		})
	}
}

func TestReportedStatuses(t *testing.T) {
	r := newReportedStatuses()
	k := statusKey("ns", "vm")
	cached := opStatus{ObservedGeneration: 1}
	written := opStatus{ObservedGeneration: 2}
	require.Equal(t, cached, r.since(k, &metav1.ObjectMeta{ResourceVersion: "9"}, cached), "nothing written")

	r.remember(k, &metav1.ObjectMeta{ResourceVersion: "10"}, written)
	require.Equal(t, written, r.since(k, &metav1.ObjectMeta{ResourceVersion: "9"}, cached), "the cache lags behind the write")
	require.Equal(t, cached, r.since(k, &metav1.ObjectMeta{ResourceVersion: "10"}, cached), "the cache shows the write")
	require.Equal(t, cached, r.since(k, &metav1.ObjectMeta{ResourceVersion: "9"}, cached), "forgotten once caught up")

	r.remember(k, &metav1.ObjectMeta{ResourceVersion: "12"}, written)
	r.forget(k)
	require.Equal(t, cached, r.since(k, &metav1.ObjectMeta{ResourceVersion: "11"}, cached), "a deleted VM is forgotten")
}
