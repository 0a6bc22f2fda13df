package runner_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/internal/testguest"
	"github.com/vmop/vmop/pkg/qmp"
	"github.com/vmop/vmop/pkg/runner"
)

// guestVM is a VM that boots the tiny Linux test guest: it onlines
// hot-plugged CPUs, ejects unplugged ones, runs the balloon driver and
// powers off on ACPI (unless told to ignore it).
const guestVM = `
firmware: bios
powerdownTimeout: 120
maximumCpus: 4
currentCpus: 1
maximumRam: 512Mi
currentRam: 512Mi
`

func newGuestVM(t *testing.T, config string, appends ...string) *vm {
	g := testguest.Build(t).WithAppend(appends...)
	args := g.QemuArgs()
	var extra []string
	for i := 0; i+1 < len(args); i += 2 {
		extra = append(extra, args[i]+" "+args[i+1])
	}
	return newVM(t, config, extra...)
}

// boot starts the runner and waits until the guest is up.
func (v *vm) boot() *qmp.Monitor {
	v.t.Helper()
	mon := v.start()
	waitRunning(v.t, mon)
	v.waitConsole(testguest.ReadyLine, 90*time.Second)
	return mon
}

// waitConsole waits until the guest has printed line on its console.
func (v *vm) waitConsole(line string, timeout time.Duration) {
	v.t.Helper()
	eventually(v.t, timeout, func() error {
		b, _ := os.ReadFile(filepath.Join(v.runtime, "console.log"))
		for l := range strings.Lines(string(b)) {
			if strings.TrimSpace(l) == line {
				return nil
			}
		}
		return fmt.Errorf("no %q on the console yet", line)
	})
}

func TestGuestShutsDownOnSIGTERM(t *testing.T) {
	v := newGuestVM(t, guestVM)
	v.boot()
	start := time.Now()
	require.NoError(t, v.cmd.Process.Signal(syscall.SIGTERM))
	code := v.wait(60 * time.Second)
	took := time.Since(start)
	require.Equal(t, runner.ExitClean, code, "a guest that powers off on ACPI gives exit 0")
	require.Less(t, took, 30*time.Second, "well before powerdownTimeout (120 s)")
	t.Logf("guest shut down %s after SIGTERM", took.Round(time.Millisecond))
	log, _ := os.ReadFile(v.output)
	require.Contains(t, string(log), "The guest shut down cleanly")
}

func TestGuestIgnoringACPIIsStopped(t *testing.T) {
	v := newGuestVM(t, strings.Replace(guestVM, "powerdownTimeout: 120", "powerdownTimeout: 3", 1), testguest.IgnoreACPI)
	v.boot()
	start := time.Now()
	require.NoError(t, v.cmd.Process.Signal(syscall.SIGTERM))
	code := v.wait(30 * time.Second)
	require.Equal(t, runner.ExitForced, code)
	require.GreaterOrEqual(t, time.Since(start), 3*time.Second, "the guest got its powerdownTimeout")
}

func TestGuestCPUsAndBalloon(t *testing.T) {
	v := newGuestVM(t, guestVM)
	mon := v.boot()
	ctx := t.Context()
	cpus := func(want int) {
		t.Helper()
		v.writeConfig(strings.Replace(guestVM, "currentCpus: 1", fmt.Sprintf("currentCpus: %d", want), 1))
		// Watch the guest, not qemu: qemu 7.2 under TCG crashes (double
		// free) when a second monitor queries CPUs during a hot-plug.
		v.waitConsole(testguest.CPUsPrefix+fmt.Sprint(want), 30*time.Second)
		eventually(t, 10*time.Second, func() error {
			n, err := pluggedCPUs(ctx, mon)
			if err == nil && n != want {
				err = fmt.Errorf("qemu has %d CPUs", n)
			}
			return err
		})
	}
	cpus(3)
	cpus(2) // unplugging: the guest ejects the CPU
	// Not tested: plugging CPUs again after an unplug (2 -> 4) made qemu
	// 7.2 under TCG abort with "double free or corruption" here; the cause
	// is not isolated yet.

	v.writeConfig(strings.Replace(guestVM, "currentRam: 512Mi", "currentRam: 256Mi", 1))
	eventually(t, 60*time.Second, func() error {
		actual, err := mon.QueryBalloon(ctx)
		if err == nil && actual > 260<<20 {
			err = fmt.Errorf("the guest has %d MiB", actual>>20)
		}
		return err
	})
}

// stopRecorder is a Reporter that notes SetStopped.
type stopRecorder struct{ stopped chan struct{} }

func (stopRecorder) Report(context.Context, runner.Status) {}
func (s stopRecorder) SetStopped(context.Context) error {
	close(s.stopped)
	return nil
}

// TestGuestShutdownStops: a guest that shuts itself down, with
// guestShutdownStops, first sets the desired state to Stopped, then the
// runner exits 0.
func TestGuestShutdownStops(t *testing.T) {
	v := newGuestVM(t, guestVM)
	v.writeFile("config.yaml", strings.Replace(readFile(t, v.config), `"/Runner":`, "\"/Runner\":\n  guestShutdownStops: true", 1))
	r, err := runner.New(runner.Options{ConfigFile: v.config, TemplateDirs: []string{filepath.Join(v.dir, "templates")}})
	require.NoError(t, err)
	rec := stopRecorder{stopped: make(chan struct{})}
	r.UseReporter(rec)
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context()) }()

	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	mon, err := qmp.Dial(ctx, filepath.Join(v.runtime, "test.sock"))
	require.NoError(t, err)
	defer mon.Close()
	waitRunning(t, mon)
	v.waitConsole(testguest.ReadyLine, 90*time.Second)
	// The power button pressed from outside the runner: for the runner,
	// the guest shuts down by itself.
	require.NoError(t, mon.SystemPowerdown(ctx))
	select {
	case err := <-done:
		require.NoError(t, err, "a clean guest shutdown")
	case <-time.After(60 * time.Second):
		t.Fatal("the runner did not end after the guest shut down")
	}
	select {
	case <-rec.stopped:
	default:
		t.Fatal("the desired state was not set to Stopped")
	}
}

// TestGuestAgentShutdown: with a guest agent connected, SIGTERM goes to the
// agent, which also works for a guest that ignores ACPI.
func TestGuestAgentShutdown(t *testing.T) {
	v := newGuestVM(t, guestVM, testguest.IgnoreACPI, testguest.Agent)
	v.boot()
	v.waitConsole(testguest.AgentLine, 30*time.Second)
	time.Sleep(200 * time.Millisecond) // the runner sees the port open (VSERPORT_CHANGE)
	require.NoError(t, v.cmd.Process.Signal(syscall.SIGTERM))
	require.Equal(t, runner.ExitClean, v.wait(60*time.Second))
	log, _ := os.ReadFile(v.output)
	require.Contains(t, string(log), "Asked the guest agent to shut down")
	require.Contains(t, string(log), "The guest shut down cleanly")
}

// TestGuestLockedTray: a guest that holds its CD drive has the tray
// locked; a medium change waits until the tray opens (the guest releases
// the drive, then the test opens the tray as a desktop's eject would).
func TestGuestLockedTray(t *testing.T) {
	const hold = 8 // seconds the guest keeps the drive
	cfg := guestVM + "drives:\n- type: ide-cd\n  file: DIR/a.iso\n"
	v := newGuestVM(t, cfg, testguest.LockCD(hold))
	mon := v.start()
	waitRunning(t, mon)
	v.waitConsole(testguest.CDLockedLine, 90*time.Second)
	locked := time.Now()
	ctx := t.Context()

	v.writeConfig(strings.Replace(cfg, "a.iso", "b.iso", 1))
	eventually(t, 5*time.Second, func() error {
		if log, _ := os.ReadFile(v.output); !strings.Contains(string(log), "CD change waits for the guest to release the tray") {
			return errors.New("the runner did not wait for the tray")
		}
		return nil
	})
	m, err := cdMedium(ctx, mon, "cd0")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(v.dir, "a.iso"), m, "the locked drive keeps its medium")

	v.waitConsole(testguest.CDReleasedLine, 2*hold*time.Second)
	require.NoError(t, mon.BlockdevOpenTray(ctx, "cd0", false))
	eventually(t, 10*time.Second, func() error {
		m, err := cdMedium(ctx, mon, "cd0")
		if err == nil && m != filepath.Join(v.dir, "b.iso") {
			err = fmt.Errorf("medium %q", m)
		}
		return err
	})
	require.GreaterOrEqual(t, time.Since(locked), time.Duration(hold)*time.Second/2, "changed only after the release")
}
