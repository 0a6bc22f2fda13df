package runner_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/vmopbin"

	"github.com/vmop/vmop/test/harness/freeport"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/spicetest"
)

// vmRunner is the vm-runner binary, for the tests that run it as a pod
// would, with signals and exit codes; the unit tests never build it.
func vmRunner(t testing.TB) string {
	t.Helper()
	vmopbin.Build(t, runner.TemplateHelper) // found beside the runner
	return vmopbin.Build(t, "vm-runner")
}

func TestMain(m *testing.M) {
	os.Exit(vmopbin.Main(m))
}

// vm is one vm-runner process with its files.
type vm struct {
	t                            testing.TB
	dir, config, runtime, output string
	cmd                          *exec.Cmd
	exited                       chan struct{}
	exitCode                     int
	spicePort                    int
	// qemu is the qemu program; empty: the host's.
	qemu string
}

// requireTools skips under -short and fails (not skips) when qemu is
// missing: make deps installs it.
func requireTools(t testing.TB) {
	t.Helper()
	prereq.Commands(t, "qemu-system-x86, swtpm", "qemu-system-x86_64", "swtpm")
}

// newVM prepares a config directory. The template is the standard one with
// a second QMP socket, through which the test watches qemu while the
// runner holds the first.
func newVM(t testing.TB, vmConfig string, extraTemplate ...string) *vm {
	t.Helper()
	requireTools(t)
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "vmt")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	v := &vm{t: t, dir: dir, config: filepath.Join(dir, "etc", "config.yaml"), runtime: filepath.Join(dir, "run"), spicePort: freeport.Get(t)}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "templates"), 0o755))
	std, _, err := templates.Read(templates.Standard)
	require.NoError(t, err)
	tmpl := string(std) + "\n-qmp unix:{{opt .RuntimeDir}}/test.sock,server=on,wait=off\n" + strings.Join(extraTemplate, "\n") + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "templates", templates.Standard), []byte(tmpl), 0o644))
	for _, f := range []string{"a.iso", "b.iso"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), []byte("medium "+f), 0o644))
	}
	v.writeConfig(vmConfig)
	return v
}

// writeConfig replaces the config as a ConfigMap volume does: a new file
// renamed over the old one.
func (v *vm) writeConfig(vmConfig string) {
	v.writeFile("config.yaml", v.configText(vmConfig))
}

// configText is the config file with vmConfig under "vm:".
func (v *vm) configText(vmConfig string) string {
	c := fmt.Sprintf(`"/Runner":
  dataDir: %s/data
  runtimeDir: %s
  vm:
    name: test
    accelerator: tcg
%s`, v.dir, v.runtime, indent(vmConfig, "    "))
	c = strings.ReplaceAll(c, "SPICEPORT", fmt.Sprint(v.spicePort))
	return strings.ReplaceAll(c, "DIR", v.dir)
}

func (v *vm) writeFile(name, content string) {
	tmp := filepath.Join(v.dir, "etc", "."+name+".tmp")
	require.NoError(v.t, os.WriteFile(tmp, []byte(content), 0o644))
	require.NoError(v.t, os.Rename(tmp, filepath.Join(v.dir, "etc", name)))
}

func indent(s, prefix string) string {
	var b strings.Builder
	for line := range strings.Lines(strings.TrimLeft(s, "\n")) {
		b.WriteString(prefix + line)
	}
	return b.String()
}

// start runs vm-runner and returns once qemu's test monitor answers.
func (v *vm) start() *qmp.Monitor {
	v.t.Helper()
	v.output = filepath.Join(v.dir, "runner.log")
	out, err := os.Create(v.output)
	require.NoError(v.t, err)
	args := []string{"-c", v.config, "--template-dir", filepath.Join(v.dir, "templates"), "--debug"}
	if v.qemu != "" {
		args = append(args, "--qemu", v.qemu)
	}
	v.cmd = exec.Command(vmRunner(v.t), args...)
	v.cmd.Stdout, v.cmd.Stderr = out, out
	v.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(v.t, v.cmd.Start())
	v.exited = make(chan struct{})
	go func() {
		_ = v.cmd.Wait()
		v.exitCode = v.cmd.ProcessState.ExitCode()
		out.Close()
		close(v.exited)
	}()
	v.t.Cleanup(func() {
		_ = v.cmd.Process.Kill()
		<-v.exited
		if v.t.Failed() {
			log, _ := os.ReadFile(v.output)
			v.t.Logf("vm-runner output:\n%s", log)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mon, err := qmp.Dial(ctx, filepath.Join(v.runtime, "test.sock"))
	require.NoError(v.t, err, "the runner did not start qemu")
	v.t.Cleanup(func() { mon.Close() })
	return mon
}

// wait waits for the runner to exit and returns its exit code.
func (v *vm) wait(timeout time.Duration) int {
	v.t.Helper()
	select {
	case <-v.exited:
		return v.exitCode
	case <-time.After(timeout):
		v.t.Fatalf("vm-runner did not exit within %s", timeout)
		return -1
	}
}

// waitRunning waits until the runner has let the guest run.
func waitRunning(t testing.TB, mon *qmp.Monitor) {
	t.Helper()
	eventually.Succeeds(t, 10*time.Second, func() error {
		st, err := mon.QueryStatus(t.Context())
		if err == nil && !st.Running {
			err = errors.New("not running: " + st.Status)
		}
		return err
	})
}

func pluggedCPUs(ctx context.Context, mon *qmp.Monitor) (int, error) {
	cpus, err := mon.QueryHotpluggableCPUs(ctx)
	n := 0
	for _, c := range cpus {
		if c.Plugged() {
			n++
		}
	}
	return n, err
}

func cdMedium(ctx context.Context, mon *qmp.Monitor, id string) (string, error) {
	blocks, err := mon.QueryBlock(ctx)
	if err != nil {
		return "", err
	}
	for _, b := range blocks {
		if b.Device == id+"-drive" {
			if b.Inserted == nil {
				return "", nil
			}
			return b.Inserted.File, nil
		}
	}
	return "", fmt.Errorf("no drive %s", id)
}

// firmwareVM has no guest OS: SeaBIOS answers nothing, which is enough to
// see qemu's side of every change and a guest that ignores ACPI.
const firmwareVM = `
firmware: bios
powerdownTimeout: 30
maximumCpus: 4
currentCpus: 1
maximumRam: 256Mi
currentRam: 192Mi
drives:
- type: ide-cd
  file: DIR/a.iso
display:
  spice:
    port: SPICEPORT
`

func TestLiveChangesWithoutGuest(t *testing.T) {
	v := newVM(t, firmwareVM)
	v.writeFile("display-password", "first")
	mon := v.start()
	ctx := t.Context()
	spice := fmt.Sprintf("127.0.0.1:%d", v.spicePort)

	waitRunning(t, mon)
	n, err := pluggedCPUs(ctx, mon)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	medium, err := cdMedium(ctx, mon, "cd0")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(v.dir, "a.iso"), medium)
	ok, err := spicetest.Login(ctx, spice, "first")
	require.NoError(t, err)
	require.True(t, ok, "the display password of the Secret works")
	out, err := exec.Command(vmRunner(t), "probe", "-c", v.config).CombinedOutput()
	require.NoError(t, err, "vm-runner probe while the VM runs: %s", out)

	t.Run("CPUs are plugged", func(t *testing.T) {
		v.writeConfig(strings.Replace(firmwareVM, "currentCpus: 1", "currentCpus: 3", 1))
		eventually.Succeeds(t, 10*time.Second, func() error {
			n, err := pluggedCPUs(ctx, mon)
			if err == nil && n != 3 {
				err = fmt.Errorf("%d CPUs", n)
			}
			return err
		})
	})
	t.Run("CD medium is changed and removed", func(t *testing.T) {
		cfg := strings.Replace(firmwareVM, "currentCpus: 1", "currentCpus: 3", 1)
		v.writeConfig(strings.Replace(cfg, "a.iso", "b.iso", 1))
		eventually.Succeeds(t, 10*time.Second, func() error {
			m, err := cdMedium(ctx, mon, "cd0")
			if err == nil && m != filepath.Join(v.dir, "b.iso") {
				err = fmt.Errorf("medium %q", m)
			}
			return err
		})
		v.writeConfig(strings.Replace(cfg, "file: DIR/a.iso", "file: \"\"", 1))
		eventually.Succeeds(t, 10*time.Second, func() error {
			m, err := cdMedium(ctx, mon, "cd0")
			if err == nil && m != "" {
				err = fmt.Errorf("medium %q", m)
			}
			return err
		})
		v.writeConfig(cfg) // a medium into the empty drive
		eventually.Succeeds(t, 10*time.Second, func() error {
			m, err := cdMedium(ctx, mon, "cd0")
			if err == nil && m != filepath.Join(v.dir, "a.iso") {
				err = fmt.Errorf("medium %q", m)
			}
			return err
		})
	})
	t.Run("a change that needs a restart is reported, not applied", func(t *testing.T) {
		cfg := strings.Replace(firmwareVM, "currentCpus: 1", "currentCpus: 3", 1)
		v.writeConfig(strings.Replace(cfg, "maximumRam: 256Mi", "maximumRam: 512Mi", 1))
		eventually.Succeeds(t, 10*time.Second, func() error {
			if log, _ := os.ReadFile(v.output); !strings.Contains(string(log), `msg="Config changes that apply at the next start" vm=test fields=[maximumRam]`) {
				return errors.New("no restart-required message in the log")
			}
			return nil
		})
		st, err := mon.QueryStatus(ctx)
		require.NoError(t, err)
		require.True(t, st.Running, "the VM keeps running")
		v.writeConfig(cfg)
	})
	t.Run("display password changes and expires", func(t *testing.T) {
		v.writeFile("display-password", "second")
		eventually.Succeeds(t, 10*time.Second, func() error {
			if ok, err := spicetest.Login(ctx, spice, "second"); err != nil || !ok {
				return fmt.Errorf("new password refused: %v", err)
			}
			return nil
		})
		ok, err := spicetest.Login(ctx, spice, "first")
		require.NoError(t, err)
		require.False(t, ok, "the old password is refused")
		v.writeFile("password-expiry", "now")
		eventually.Succeeds(t, 10*time.Second, func() error {
			if ok, err := spicetest.Login(ctx, spice, "second"); err != nil || ok {
				return fmt.Errorf("expired password accepted: %v", err)
			}
			return nil
		})
	})
	t.Run("an invalid config keeps the VM", func(t *testing.T) {
		v.writeConfig("maximumRam: 4Gx\n")
		time.Sleep(500 * time.Millisecond)
		st, err := mon.QueryStatus(ctx)
		require.NoError(t, err)
		require.True(t, st.Running)
		log, _ := os.ReadFile(v.output)
		require.Contains(t, string(log), "The changed config is invalid")
	})
	t.Run("powerdownTimeout changed during the shutdown counts", func(t *testing.T) {
		v.writeConfig(strings.Replace(firmwareVM, "currentCpus: 1", "currentCpus: 3", 1))
		start := time.Now()
		require.NoError(t, v.cmd.Process.Signal(syscall.SIGTERM))
		time.Sleep(time.Second)
		v.writeConfig(strings.Replace(firmwareVM, "powerdownTimeout: 30", "powerdownTimeout: 2", 1))
		code := v.wait(20 * time.Second)
		took := time.Since(start)
		require.Equal(t, runnerconfig.ExitForced, code, "SeaBIOS ignores ACPI: the stop is forced")
		require.Less(t, took, 10*time.Second, "the shortened timeout applied")
		require.GreaterOrEqual(t, took, 2*time.Second)
		log, _ := os.ReadFile(v.output)
		require.Contains(t, string(log), "The guest did not shut down within powerdownTimeout (2s): qemu is stopped hard")
		out, err := exec.Command(vmRunner(t), "probe", "-c", v.config).CombinedOutput()
		require.Error(t, err, "vm-runner probe after the VM stopped: %s", out)
	})
}

// TestMissingCDBootsWithoutIt: a medium that cannot be opened empties its
// drive, not the VM: the guest runs, the other drive has its medium, and
// the status names the drive and the file. A fixed config fills it.
func TestMissingCDBootsWithoutIt(t *testing.T) {
	cfg := strings.Replace(firmwareVM, "- type: ide-cd\n  file: DIR/a.iso\n",
		"- type: ide-cd\n  file: DIR/missing.iso\n- type: ide-cd\n  file: DIR/a.iso\n", 1)
	cfg = strings.Replace(cfg, "powerdownTimeout: 30", "powerdownTimeout: 1", 1)
	v := newVM(t, cfg)
	rec := &eventRecorder{}
	done, _ := v.runInProcess(rec)
	mon, err := qmp.Dial(t.Context(), filepath.Join(v.runtime, "test.sock"))
	require.NoError(t, err)
	t.Cleanup(func() { mon.Close() })
	waitRunning(t, mon)
	ctx := t.Context()
	medium, err := cdMedium(ctx, mon, "cd0")
	require.NoError(t, err)
	require.Empty(t, medium)
	medium, err = cdMedium(ctx, mon, "cd1")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(v.dir, "a.iso"), medium)
	st := rec.Last()
	require.Len(t, st.CDProblems, 1, "%+v", st.CDProblems)
	p := st.CDProblems[0]
	require.Equal(t, "cd0", p.Drive)
	require.Equal(t, 0, p.Index)
	require.Equal(t, filepath.Join(v.dir, "missing.iso"), p.Image)
	require.Contains(t, p.Err, "No such file or directory")
	// The event says the same, as a warning, once; the medium the VM
	// starts with is no change.
	e := rec.only(t, runner.ReasonMediumUnavailable)
	require.True(t, e.Warning)
	require.Equal(t, p.String(), e.Message)
	require.Contains(t, e.Message, "CD drive cd0 (spec.vm.disks[0].cdrom.image) is empty: \""+p.Image+"\" cannot be opened: ")
	require.Zero(t, rec.count(runner.ReasonMediumChanged))

	v.writeConfig(strings.Replace(cfg, "missing.iso", "b.iso", 1))
	// Generous: once failed after 10 s on a machine busy with TCG guests.
	eventually.Succeeds(t, 30*time.Second, func() error {
		m, err := cdMedium(ctx, mon, "cd0")
		if err == nil && m != filepath.Join(v.dir, "b.iso") {
			err = fmt.Errorf("medium %q", m)
		}
		return err
	})
	eventually.Succeeds(t, 10*time.Second, func() error {
		if ps := rec.Last().CDProblems; len(ps) > 0 {
			return fmt.Errorf("problems %+v", ps)
		}
		return nil
	})
	e = rec.only(t, runner.ReasonMediumChanged)
	require.False(t, e.Warning)
	require.Equal(t, fmt.Sprintf("CD drive cd0 (spec.vm.disks[0].cdrom.image): inserted %q", filepath.Join(v.dir, "b.iso")), e.Message)
	select {
	case err := <-done:
		t.Fatalf("the runner ended: %v", err)
	default:
	}
}

// TestQemuRefusesToStart: qemu's own words reach the runner's error and
// exit code, which a pod's termination message carries to the status.
func TestQemuRefusesToStart(t *testing.T) {
	v := newVM(t, firmwareVM+"cpuModel: no-such-cpu\n")
	out, err := exec.Command(vmRunner(t), "-c", v.config, "--template-dir", filepath.Join(v.dir, "templates")).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, runnerconfig.ExitQemuRefused, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), "qemu refused to start (exited with code 1): qemu-system-x86_64: unable to find CPU model 'no-such-cpu'")

	out, err = exec.Command(vmRunner(t), "check", "-c", v.config).CombinedOutput()
	require.ErrorAs(t, err, &ee, "%s", out)
	require.Equal(t, runnerconfig.ExitQemuRefused, ee.ExitCode(), "%s", out)
	require.Contains(t, string(out), "unable to find CPU model 'no-such-cpu'")

	// 256M is no whole number of MiB, which qemu needs: rounded up.
	v.writeConfig(strings.Replace(firmwareVM, "maximumRam: 256Mi", "maximumRam: 256M", 1))
	out, err = exec.Command(vmRunner(t), "check", "-c", v.config, "--spice-address", "127.0.0.1").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "qemu accepts the VM test")
}

func TestQemuKilled(t *testing.T) {
	v := newVM(t, firmwareVM)
	mon := v.start()
	waitRunning(t, mon)
	pid := qemuPID(t, v)
	killed := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	// The bound only tells "at once" from "after powerdownTimeout" (30 s)
	// on a slow machine; the log shows the real figure.
	code := v.wait(10 * time.Second)
	t.Logf("the runner exited %s after qemu was killed", time.Since(killed).Round(time.Millisecond))
	require.Equal(t, runnerconfig.ExitCrashed, code)
	log, _ := os.ReadFile(v.output)
	require.Contains(t, string(log), "killed")
}

// qemuPID finds the qemu child of the runner.
func qemuPID(t *testing.T, v *vm) int {
	t.Helper()
	pid := childNamed(t, v, "qemu")
	require.NotZero(t, pid, "no qemu child of %d", v.cmd.Process.Pid)
	return pid
}

// childNamed finds a child of the runner by its command name; any of the
// runner's threads may have forked it. 0 when there is none.
func childNamed(t testing.TB, v *vm, prefix string) int {
	t.Helper()
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", v.cmd.Process.Pid))
	require.NoError(t, err)
	for _, task := range tasks {
		children, _ := os.ReadFile(task)
		for _, f := range strings.Fields(string(children)) {
			var pid int
			_, _ = fmt.Sscan(f, &pid)
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(comm), prefix) {
				return pid
			}
		}
	}
	return 0
}

func TestInvalidConfigNeverStartsQemu(t *testing.T) {
	v := newVM(t, "maximumRam: 4Gx\ncurrentCpus: 0\n")
	marker := filepath.Join(v.dir, "qemu-started")
	fake := filepath.Join(v.dir, "fake-qemu")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\ntouch "+marker+"\n"), 0o755))
	out, err := exec.Command(vmRunner(t), "-c", v.config, "--qemu", fake).CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, runnerconfig.ExitConfig, ee.ExitCode())
	require.Contains(t, string(out), v.config)
	require.Contains(t, string(out), "/Runner.vm.maximumRam")
	require.NoFileExists(t, marker)
}

func TestTPMAndCloudInit(t *testing.T) {
	v := newVM(t, firmwareVM+"useTpm: true\n")
	v.writeFile("config.yaml", strings.Replace(readFile(t, v.config), `"/Runner":`, `"/Runner":
  cloudInit:
    userData: {hostname: tpm-test}
    networkConfig: {version: 2}`, 1))
	mon := v.start()
	waitRunning(t, mon)
	ctx := t.Context()

	blocks, err := mon.QueryBlock(ctx)
	require.NoError(t, err)
	var seed string
	for _, b := range blocks {
		if b.Inserted != nil && strings.HasSuffix(b.Inserted.File, "cloud-init.iso") {
			seed = b.Inserted.File
		}
	}
	require.NotEmpty(t, seed, "the cloud-init seed is attached")
	out, err := exec.Command("isoinfo", "-R", "-i", seed, "-x", "/user-data").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "#cloud-config\nhostname: tpm-test\n", string(out))

	swtpm := childNamed(t, v, "swtpm")
	require.NotZero(t, swtpm, "swtpm runs beside qemu")
	state, err := filepath.Glob(filepath.Join(v.dir, "data", "tpm", "*"))
	require.NoError(t, err)
	require.NotEmpty(t, state, "the TPM state is kept in the data directory")

	require.NoError(t, v.cmd.Process.Signal(syscall.SIGTERM))
	v.writeConfig(strings.Replace(firmwareVM, "powerdownTimeout: 30", "powerdownTimeout: 1", 1) + "useTpm: true\n")
	v.wait(20 * time.Second)
	require.NoDirExists(t, v.runtime, "the runtime files are removed")
	require.Error(t, syscall.Kill(swtpm, 0), "swtpm is stopped after qemu")
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// runInProcess runs the runner in the test's process, reporting to rec,
// until the test ends or calls stop (SIGTERM); the channel gets Run's
// result.
func (v *vm) runInProcess(rec runner.Reporter, set ...func(*runner.Runner)) (<-chan error, func()) {
	v.t.Helper()
	r, err := runner.New(runner.Options{ConfigFile: v.config, TemplateDirs: []string{filepath.Join(v.dir, "templates")},
		TemplateHelper: vmopbin.Build(v.t, runner.TemplateHelper)})
	require.NoError(v.t, err)
	r.UseReporter(rec)
	for _, s := range set {
		s(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	result := make(chan error, 1)
	go func() {
		err := r.Run(ctx)
		result <- err
		done <- err
	}()
	v.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			v.t.Logf("runner: %v", err)
		}
	})
	return result, cancel
}

// TestStatusReports: what the runner observes reaches its Reporter: the
// VM running, CPUs, the password serial, and a SPICE client connecting
// and leaving; of these, only the start and a changed password are events.
// A stop of a guest that ignores ACPI ends in a forced stop.
func TestStatusReports(t *testing.T) {
	v := newVM(t, strings.Replace(firmwareVM, "powerdownTimeout: 30", "powerdownTimeout: 1", 1))
	v.writeFile("display-password", "pw")
	rec := &eventRecorder{}
	result, stop := v.runInProcess(rec)
	eventually.Succeeds(t, 30*time.Second, func() error {
		// No guest driver takes the balloon's RAM: the guest has all of it,
		// and says so without a BALLOON_CHANGE event.
		if _, ok := rec.Find(0, func(s runner.Status) bool {
			return s.Running && s.CPUs == 1 && s.RAM == 256<<20 && s.DisplayPasswordSerial == 1 &&
				(s.Accelerator == "kvm" || s.Accelerator == "tcg")
		}); !ok {
			return errors.New("no running status with 1 CPU, 256 MiB, password serial 1 and an accelerator")
		}
		return nil
	})
	ok, err := spicetest.Login(t.Context(), fmt.Sprintf("127.0.0.1:%d", v.spicePort), "pw")
	require.NoError(t, err)
	require.True(t, ok)
	eventually.Succeeds(t, 10*time.Second, func() error {
		if _, ok := rec.Find(0, func(s runner.Status) bool { return s.ConsoleClient == "127.0.0.1" }); !ok {
			return errors.New("no status with the console client")
		}
		return nil
	})
	// Login closed its connection.
	eventually.Succeeds(t, 10*time.Second, func() error {
		if c := rec.Last().ConsoleClient; c != "" {
			return fmt.Errorf("console client %q after it left", c)
		}
		return nil
	})

	v.writeFile("display-password", "secret-2")
	e := rec.wait(t, runner.ReasonDisplayPasswordChanged)
	require.Equal(t, "The display password changed (expiry: never)", e.Message)

	// SeaBIOS ignores the power button.
	stop()
	var exit *runner.ExitError
	require.ErrorAs(t, <-result, &exit)
	require.Equal(t, runnerconfig.ExitForced, exit.Code)
	require.Equal(t, []string{runner.ReasonQemuStarted, runner.ReasonDisplayPasswordChanged, runner.ReasonShutdownRequested, runner.ReasonShutdownForced}, rec.reasons())
	require.Equal(t, "qemu runs the guest with the tcg accelerator", rec.only(t, runner.ReasonQemuStarted).Message)
	require.Equal(t, "Pressed the ACPI power button (powerdownTimeout 1s)", rec.only(t, runner.ReasonShutdownRequested).Message)
	forced := rec.only(t, runner.ReasonShutdownForced)
	require.True(t, forced.Warning)
	require.Equal(t, "The guest did not shut down within powerdownTimeout (1s): qemu is stopped hard", forced.Message)
}
