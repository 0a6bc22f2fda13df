package runner_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/test/harness/statusrecorder"
	"github.com/vmop/vmop/test/harness/testguest"
)

// eventRecorder keeps the statuses and the events the runner reports.
type eventRecorder struct {
	statusrecorder.Recorder
	mu     sync.Mutex
	events []runner.Event
}

var _ runner.EventReporter = (*eventRecorder)(nil)

func (r *eventRecorder) Event(_ context.Context, e runner.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// reasons are the events' reasons in the order reported.
func (r *eventRecorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Reason)
	}
	return out
}

func (r *eventRecorder) count(reason string) int {
	n := 0
	for _, got := range r.reasons() {
		if got == reason {
			n++
		}
	}
	return n
}

// only returns the one event with reason, failing unless there is exactly
// one.
func (r *eventRecorder) only(t testing.TB, reason string) runner.Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var found []runner.Event
	for _, e := range r.events {
		if e.Reason == reason {
			found = append(found, e)
		}
	}
	require.Len(t, found, 1, "events %s in %+v", reason, r.events)
	return found[0]
}

// wait waits for the first event with reason.
func (r *eventRecorder) wait(t testing.TB, reason string) runner.Event {
	t.Helper()
	eventually.Succeeds(t, 90*time.Second, func() error {
		if !slices.Contains(r.reasons(), reason) {
			return fmt.Errorf("no %s event; events: %v", reason, r.reasons())
		}
		return nil
	})
	return r.only(t, reason)
}

// TestEventStartFailed: qemu's refusal is a warning with its last words.
func TestEventStartFailed(t *testing.T) {
	v := newVM(t, firmwareVM+"cpuModel: no-such-cpu\n")
	rec := &eventRecorder{}
	result, _ := v.runInProcess(rec)
	var exit *runner.ExitError
	require.ErrorAs(t, <-result, &exit)
	require.Equal(t, runnerconfig.ExitQemuRefused, exit.Code)
	require.Equal(t, []string{runner.ReasonStartFailed}, rec.reasons())
	e := rec.only(t, runner.ReasonStartFailed)
	require.True(t, e.Warning)
	require.Equal(t, "The VM did not start: "+exit.Error(), e.Message)
	require.Contains(t, e.Message, "qemu refused to start (exited with code 1): qemu-system-x86_64: unable to find CPU model 'no-such-cpu'")
}

// TestEventQemuExited: qemu ending without a guest shutdown (here told to
// quit by someone else) is a warning.
func TestEventQemuExited(t *testing.T) {
	v := newVM(t, firmwareVM)
	rec := &eventRecorder{}
	result, _ := v.runInProcess(rec)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	mon, err := qmp.Dial(ctx, filepath.Join(v.runtime, "test.sock"))
	require.NoError(t, err)
	defer mon.Close()
	waitRunning(t, mon)
	rec.wait(t, runner.ReasonQemuStarted)
	_ = mon.Quit(ctx) // qemu may close the monitor before it answers
	var exit *runner.ExitError
	require.ErrorAs(t, <-result, &exit)
	require.Equal(t, runnerconfig.ExitCrashed, exit.Code)
	require.Equal(t, []string{runner.ReasonQemuStarted, runner.ReasonQemuExited}, rec.reasons())
	e := rec.only(t, runner.ReasonQemuExited)
	require.True(t, e.Warning)
	require.True(t, strings.HasPrefix(e.Message, "qemu exited normally without a guest shutdown"), e.Message)
}

// TestGuestEvents walks a guest's life with its agent: started, booted,
// CPUs and RAM changed live, shut down through the agent when the runner
// is told to stop; nothing else is an event.
func TestGuestEvents(t *testing.T) {
	v := newGuestVM(t, guestVM, testguest.Agent)
	rec := &eventRecorder{}
	result, stop := v.runInProcess(rec)
	v.waitConsole(testguest.ReadyLine, 90*time.Second)
	// The stand-in agent answers guest-sync only.
	require.Equal(t, "The guest agent answers (it does not tell the guest's OS)", rec.wait(t, runner.ReasonBooted).Message)

	cpus := strings.Replace(guestVM, "currentCpus: 1", "currentCpus: 2", 1)
	v.writeConfig(cpus)
	require.Equal(t, "The guest has 2 CPUs (before: 1)", rec.wait(t, runner.ReasonCPUsChanged).Message)
	v.waitConsole(testguest.CPUsPrefix+"2", 30*time.Second)
	v.writeConfig(strings.Replace(cpus, "currentRam: 512Mi", "currentRam: 256Mi", 1))
	require.Equal(t, "The guest's RAM is 256 MiB (balloon)", rec.wait(t, runner.ReasonRAMChanged).Message)

	stop()
	require.NoError(t, <-result)
	require.Equal(t, []string{
		runner.ReasonQemuStarted, runner.ReasonBooted, runner.ReasonCPUsChanged, runner.ReasonRAMChanged,
		runner.ReasonShutdownRequested, runner.ReasonShutdownCompleted,
	}, rec.reasons())
	require.Equal(t, "Asked the guest agent to shut the guest down (powerdownTimeout 120s)", rec.only(t, runner.ReasonShutdownRequested).Message)
	require.Regexp(t, `^The guest shut down [0-9.]+m?s after it was asked to$`, rec.only(t, runner.ReasonShutdownCompleted).Message)
}
