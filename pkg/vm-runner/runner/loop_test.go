package runner

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/test/harness/eventually"
)

// The unit tests of the shutdown and of the runner's exit: the loop
// against fakeQemu (see fakeqemu_test.go), no qemu.

// exitCode is the exit code the runner's error stands for.
func exitCode(t *testing.T, err error) int {
	t.Helper()
	if err == nil {
		return runnerconfig.ExitClean
	}
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	return exit.Code
}

func TestShutdownByACPI(t *testing.T) {
	v := newTestVM(t, baseConfig(t.TempDir()))
	v.run()
	n := len(v.q.commands(0))
	v.sigterm()
	require.Equal(t, runnerconfig.ExitClean, exitCode(t, v.result()))
	require.Equal(t, []string{"system_powerdown"}, v.q.commands(n))
	require.Equal(t, "Pressed the ACPI power button (powerdownTimeout 30s)", v.rec.waitEvent(t, ReasonShutdownRequested, 1).Message)
	require.Contains(t, v.rec.waitEvent(t, ReasonShutdownCompleted, 1).Message, "The guest shut down ")
	require.False(t, v.rec.last().Running)
	require.False(t, v.r.ready.Load())
}

func TestShutdownForcedAfterPowerdownTimeout(t *testing.T) {
	c := baseConfig(t.TempDir())
	*c.VM.PowerdownTimeout = 1
	v := newTestVM(t, c)
	v.q.ignoreACPI()
	v.run()
	n := len(v.q.commands(0))
	start := time.Now()
	v.sigterm()
	v.rec.waitEvent(t, ReasonShutdownRequested, 1)
	require.Equal(t, []string{"system_powerdown"}, v.q.commands(n), "no quit before powerdownTimeout")

	forced := v.rec.waitEvent(t, ReasonShutdownForced, 1)
	require.GreaterOrEqual(t, time.Since(start), time.Second)
	require.True(t, forced.Warning)
	require.Equal(t, "The guest did not shut down within powerdownTimeout (1s): qemu is stopped hard", forced.Message)
	require.Equal(t, runnerconfig.ExitForced, exitCode(t, v.result()))
	require.Equal(t, []string{"system_powerdown", "quit"}, v.q.commands(n))
	require.Empty(t, v.rec.eventsOf(ReasonQemuExited), "ShutdownForced told of it")
	require.Empty(t, v.rec.eventsOf(ReasonShutdownCompleted))
}

// A powerdownTimeout changed during the stop counts from the stop's
// start.
func TestShutdownTimeoutChangedWhileStopping(t *testing.T) {
	c := baseConfig(t.TempDir())
	v := newTestVM(t, c)
	v.q.ignoreACPI()
	v.run()
	v.sigterm()
	v.rec.waitEvent(t, ReasonShutdownRequested, 1)
	*c.VM.PowerdownTimeout = 0
	v.writeConfig(c)
	require.Equal(t, runnerconfig.ExitForced, exitCode(t, v.result()))
	require.Contains(t, v.rec.waitEvent(t, ReasonShutdownForced, 1).Message, "powerdownTimeout (0s)")
}

// qemu that refuses to quit is killed; the exit still says forced.
func TestShutdownForcedQuitFails(t *testing.T) {
	c := baseConfig(t.TempDir())
	*c.VM.PowerdownTimeout = 0
	v := newTestVM(t, c)
	v.q.ignoreACPI()
	v.q.quitFails()
	v.run()
	n := len(v.q.commands(0))
	v.sigterm()
	require.Equal(t, runnerconfig.ExitForced, exitCode(t, v.result()))
	require.Equal(t, []string{"system_powerdown", "quit"}, v.q.commands(n))
	require.Equal(t, "killed by signal 9 (killed)", v.q.proc.describe())
}

func TestGuestShutsItselfDown(t *testing.T) {
	for _, stops := range []bool{false, true} {
		c := baseConfig(t.TempDir())
		c.GuestShutdownStops = stops
		v := newTestVM(t, c)
		v.run()
		v.q.powerOff()
		require.Equal(t, runnerconfig.ExitClean, exitCode(t, v.result()))
		msg := v.rec.waitEvent(t, ReasonGuestShutdown, 1).Message
		require.Equal(t, stops, v.rec.stopped, "desired state set to Stopped")
		if stops {
			require.Equal(t, "The guest shut itself down; it stays stopped (spec.guestShutdownStops)", msg)
		} else {
			require.Equal(t, "The guest shut itself down; it starts again (spec.guestShutdownStops is not set)", msg)
		}
	}
}

// The guest's SHUTDOWN can reach the runner after qemu's exit.
func TestGuestShutdownEventAfterExit(t *testing.T) {
	v := newTestVM(t, baseConfig(t.TempDir()))
	v.run()
	v.q.powerOffSlowSocket()
	require.Equal(t, runnerconfig.ExitClean, exitCode(t, v.result()))
	v.rec.waitEvent(t, ReasonGuestShutdown, 1)
}

func TestQemuCrashes(t *testing.T) {
	v := newTestVM(t, baseConfig(t.TempDir()))
	v.run()
	require.NoError(t, syscall.Kill(v.q.proc.cmd.Process.Pid, syscall.SIGKILL))
	err := v.result()
	require.Equal(t, runnerconfig.ExitCrashed, exitCode(t, err))
	require.Equal(t, "qemu killed by signal 9 (killed) without a guest shutdown", errors.Unwrap(err).Error())
	exited := v.rec.waitEvent(t, ReasonQemuExited, 1)
	require.True(t, exited.Warning)
	require.Equal(t, "qemu killed by signal 9 (killed) without a guest shutdown; its last words: "+fakeQemuWords, exited.Message)
	s := v.rec.last()
	require.False(t, s.Running || s.Booted)
}

// TestLoopStuck: a runner whose loop waits on qemu for longer than
// loopStale (here a live change sent to a qemu that stopped answering,
// with the watchdog not running) fails its liveness probe, saying why;
// its readiness is not what tells.
func TestLoopStuck(t *testing.T) {
	c := baseConfig(t.TempDir())
	v := newTestVM(t, c)
	v.r.loopBeat, v.r.loopStale = 20*time.Millisecond, 500*time.Millisecond
	require.NoError(t, os.MkdirAll(v.r.runtimeDir, 0o700))
	stop, err := v.r.serveProbe()
	require.NoError(t, err)
	defer stop()
	v.run()
	probe := func() error { return Probe(t.Context(), v.r.opts.ConfigFile, true) }
	eventually.Succeeds(t, 5*time.Second, probe)

	v.q.hang()
	c.VM.CurrentCPUs = 3
	v.writeConfig(c)
	eventually.Succeeds(t, 10*time.Second, func() error {
		err := probe()
		if err == nil {
			return errors.New("the liveness probe passes while the loop waits on qemu")
		}
		if !strings.Contains(err.Error(), "the runner's loop has not turned for ") {
			return err
		}
		return nil
	})
	require.ErrorContains(t, probe(), "it is stuck, and the VM cannot be managed")
	// qemu's end frees the loop.
	require.NoError(t, syscall.Kill(v.q.proc.cmd.Process.Pid, syscall.SIGKILL))
	require.Equal(t, runnerconfig.ExitCrashed, exitCode(t, v.result()))
}

// TestQemuDeadlocks: a qemu that sleeps and never answers (deadlocked)
// is killed after qmpDeadMisses asks.
func TestQemuDeadlocks(t *testing.T) {
	v := newTestVM(t, baseConfig(t.TempDir()))
	v.r.qmpPing = 20 * time.Millisecond
	v.run()
	go v.r.watchQemu(t.Context())
	v.q.hang()
	err := v.result()
	require.Equal(t, runnerconfig.ExitCrashed, exitCode(t, err))
	require.Equal(t, "qemu did not answer its monitor for 600ms (deadlocked, or busy for too long): it was killed", errors.Unwrap(err).Error())
	require.Contains(t, v.rec.waitEvent(t, ReasonQemuHung, 1).Message, "for 600ms (deadlocked")
	require.Contains(t, v.log.String(), "left running for now")
}

// TestQemuHangs: a qemu that stops answering its monitor (SIGSTOP here)
// is killed after qmpMisses asks, and the runner exits with why, so that
// the kubelet starts the VM again.
func TestQemuHangs(t *testing.T) {
	v := newTestVM(t, baseConfig(t.TempDir()))
	v.r.qmpPing = 50 * time.Millisecond
	v.run()
	go v.r.watchQemu(t.Context())
	require.NoError(t, syscall.Kill(v.q.proc.cmd.Process.Pid, syscall.SIGSTOP))
	v.q.hang()
	err := v.result()
	require.Equal(t, runnerconfig.ExitCrashed, exitCode(t, err))
	require.Equal(t, "qemu did not answer its monitor for 150ms (stopped, or stuck in the host): it was killed", errors.Unwrap(err).Error())
	hung := v.rec.waitEvent(t, ReasonQemuHung, 1)
	require.True(t, hung.Warning)
	require.Contains(t, hung.Message, "qemu did not answer its monitor for 150ms")
	require.Empty(t, v.rec.eventsOf(ReasonQemuExited))
}
