package runner_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/spicetest"
)

// setPassword runs vm-runner display-password as kubectl vm console does
// in the pod: the password on stdin. It returns the exit code and output.
func (v *vm) setPassword(password, expiry string) (int, string) {
	v.t.Helper()
	cmd := exec.Command(vmRunner(v.t), append(runnerconfig.DisplayPasswordCommand(expiry)[1:], "-c", v.config)...)
	cmd.Stdin = strings.NewReader(password + "\n")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), string(out)
	}
	require.NoError(v.t, err)
	return 0, string(out)
}

// waitProbe waits until the runner answers on its socket.
func (v *vm) waitProbe() {
	v.t.Helper()
	eventually.Succeeds(v.t, 10*time.Second, func() error {
		if out, err := exec.Command(vmRunner(v.t), "probe", "-c", v.config).CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
}

// login tells whether password opens the VM's display.
func (v *vm) login(password string) bool {
	v.t.Helper()
	ok, err := spicetest.Login(v.t.Context(), fmt.Sprintf("127.0.0.1:%d", v.spicePort), password)
	require.NoError(v.t, err)
	return ok
}

// TestDisplayLockedWithoutSecret: a VM that starts without a display
// Secret (GitOps mode before anyone made one) has a locked display, not an
// open one; a password handed over through the pod opens it at once, a
// Secret that appears later applies live, and a Secret that goes away
// locks it again.
func TestDisplayLockedWithoutSecret(t *testing.T) {
	v := newVM(t, firmwareVM)
	mon := v.start()
	waitRunning(t, mon)
	v.waitProbe()

	require.False(t, v.login(""), "no password opens a display that has none set")
	require.False(t, v.login("guess"), "any password opens a display that has none set")

	code, out := v.setPassword("handed-over", "+60")
	require.Zero(t, code, out)
	require.True(t, v.login("handed-over"), "the password handed over through the pod applies at once")
	require.False(t, v.login("guess"))

	t.Run("a Secret that appears later applies live", func(t *testing.T) {
		v.writeFile("display-password", "from-secret")
		eventually.Succeeds(t, 10*time.Second, func() error {
			if !v.login("from-secret") {
				return errors.New("the Secret's password is refused")
			}
			return nil
		})
		require.False(t, v.login("handed-over"))
	})
	t.Run("a handed-over password outlives a reload", func(t *testing.T) {
		code, out := v.setPassword("second", "+60")
		require.Zero(t, code, out)
		// A config change rereads the Secret's files, which did not change.
		v.writeConfig(strings.Replace(firmwareVM, "currentCpus: 1", "currentCpus: 2", 1))
		eventually.Succeeds(t, 10*time.Second, func() error {
			if n, err := pluggedCPUs(t.Context(), mon); err != nil || n != 2 {
				return fmt.Errorf("%d CPUs (%v)", n, err)
			}
			return nil
		})
		require.True(t, v.login("second"))
	})
	t.Run("a Secret that goes away locks the display", func(t *testing.T) {
		require.NoError(t, os.Remove(filepath.Join(v.dir, "etc", "display-password")))
		v.writeConfig(firmwareVM) // the removal alone is no change of a watched file's content
		eventually.Succeeds(t, 10*time.Second, func() error {
			if v.login("second") || v.login("from-secret") {
				return errors.New("a password still opens the display")
			}
			return nil
		})
	})
	t.Run("bad input is refused with a reason", func(t *testing.T) {
		code, out := v.setPassword("x", "tomorrow")
		require.Equal(t, runnerconfig.ExitPasswordFailed, code)
		require.Contains(t, out, `expiry "tomorrow": must be now, never, +SECONDS or SECONDS since the epoch`)
		code, out = v.setPassword("", "+5")
		require.Equal(t, runnerconfig.ExitPasswordFailed, code)
		require.Contains(t, out, "no password on stdin")
	})
}

// TestDisplayWithoutPassword: the opt-out runs SPICE without a password,
// and display-password says there is none to set.
func TestDisplayWithoutPassword(t *testing.T) {
	v := newVM(t, strings.Replace(firmwareVM, "    port: SPICEPORT", "    port: SPICEPORT\n    withoutPassword: true", 1))
	mon := v.start()
	waitRunning(t, mon)
	v.waitProbe()
	require.True(t, v.login(""), "the opted-out display takes no password")
	code, out := v.setPassword("x", "+5")
	require.Equal(t, runnerconfig.ExitDisplayWithoutPassword, code, out)
	require.Contains(t, out, "the display runs without a password")
}
