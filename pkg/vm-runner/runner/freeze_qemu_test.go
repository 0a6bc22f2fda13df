package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/test/harness/testguest"
)

// TestFreeze: vm-runner freeze and thaw, through the runner's socket, the
// real qemu and the test guest's stand-in agent: a freeze holds until
// thawed, or until its timeout, when the runner thaws it itself and warns;
// the VM's stop thaws a frozen guest first.
func TestFreeze(t *testing.T) {
	v := newGuestVM(t, guestVM, testguest.Agent)
	rec := &eventRecorder{}
	result, stop := v.runInProcess(rec)
	v.waitConsole(testguest.ReadyLine, 90*time.Second)
	rec.wait(t, runner.ReasonBooted)

	// Nobody thaws: the runner does, at the timeout.
	res, err := runner.Freeze(t.Context(), v.config, 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, 1, res.FileSystems)
	v.waitConsole(testguest.FrozenLine, 10*time.Second)
	require.Equal(t, "Froze the guest's 1 file systems for a snapshot; they are thawed when it is taken, at the latest in 2s",
		rec.wait(t, runner.ReasonFrozen).Message)
	e := rec.wait(t, runner.ReasonFreezeExpired)
	require.True(t, e.Warning)
	// After 2 s and the agent's turn: the stand-in makes the runner's
	// poll of what the guest is wait for its timeout.
	require.Regexp(t, `^Thawed the guest's 1 file systems after ([2-9]|1[0-9])\.[0-9]+s: the freeze's timeout \(2s\) ran out before anyone thawed them`, e.Message)
	v.waitConsole(testguest.ThawedLine, 10*time.Second)

	// Thawed as asked.
	_, err = runner.Freeze(t.Context(), v.config, time.Minute)
	require.NoError(t, err)
	res, err = runner.Freeze(t.Context(), v.config, 0)
	require.NoError(t, err)
	require.Equal(t, 1, res.FileSystems)
	require.Regexp(t, `^Thawed the guest's 1 file systems after [0-9.]+m?s$`, rec.wait(t, runner.ReasonThawed).Message)
	// A thaw of a guest that is not frozen thaws nothing, and says so.
	res, err = runner.Freeze(t.Context(), v.config, 0)
	require.NoError(t, err)
	require.Zero(t, res.FileSystems)
	require.Equal(t, 1, rec.count(runner.ReasonThawed))

	// Frozen at the VM's stop: thawed first, and the guest shuts down.
	_, err = runner.Freeze(t.Context(), v.config, time.Minute)
	require.NoError(t, err)
	stop()
	require.NoError(t, <-result)
	var thawed []string
	for _, e := range rec.events {
		if e.Reason == runner.ReasonThawed {
			thawed = append(thawed, e.Message)
		}
	}
	require.Len(t, thawed, 2)
	require.True(t, strings.HasSuffix(thawed[1], ": the VM is stopping"), thawed[1])
	require.Equal(t, 1, rec.count(runner.ReasonShutdownCompleted))
}

// TestFreezeWithoutAgent: a guest without an agent cannot be frozen; the
// error says that a snapshot now is crash-consistent.
func TestFreezeWithoutAgent(t *testing.T) {
	v := newVM(t, firmwareVM)
	rec := &eventRecorder{}
	_, _ = v.runInProcess(rec)
	rec.wait(t, runner.ReasonQemuStarted)
	_, err := runner.Freeze(t.Context(), v.config, time.Minute)
	require.ErrorIs(t, err, runner.ErrNoAgent)
	require.ErrorContains(t, err, "a snapshot now is crash-consistent")
	_, err = runner.Freeze(t.Context(), v.config, 11*time.Minute)
	require.ErrorContains(t, err, `timeout "11m0s": must be a duration above 0 and at most 10m0s`)
}
