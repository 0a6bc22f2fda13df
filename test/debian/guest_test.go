// Package debian_test runs vm-runner stand-alone with a real Debian 12
// guest (test/harness/debianguest) on the runner image's qemu, and checks each
// of the runner's promises against what the guest itself reports: its
// agent's answers, its serial console, files it wrote. `go test -run
// Debian ./...` runs these alone.
//
// Booting takes about a minute under TCG, so each test boots a guest once
// and runs its checks on it in order; only what needs a new boot (data
// across a shutdown, changed cloud-init data, TPM state) boots again. The
// two tests run one after the other: side by side, with the other test
// packages on two cores, the test cluster's API server fell behind.
package debian_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
	"github.com/vmop/vmop/test/harness/debianguest"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/statusrecorder"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// TestMain builds vm-runner-template, which the runners run, once.
func TestMain(m *testing.M) {
	os.Exit(vmopbin.Main(m))
}

// mac is the test NIC's address, which the network-config matches.
const mac = "52:54:00:12:34:56"

// testTemplate adds to the standard template a second QMP socket for the
// test, and a NIC on qemu's user network that reaches nothing outside
// (restrict=on), so that the guest's network config has a device.
const testTemplate = `
-qmp unix:{{opt .RuntimeDir}}/test.sock,server=on,wait=off
-netdev user,id=testnet,restrict=on,net=10.0.2.0/24
-device virtio-net-pci,netdev=testnet,mac=` + mac + `
`

// runnerRoot is the vm-runner image's root file system, whose qemu 10.0
// the guests run on: Debian 12's qemu 7.2 aborted now and then with heap
// corruption ("double free or corruption") at the shutdown after CPU
// hot-plugs, and some time after host forwards had carried SSH sessions;
// the image's qemu does not, and it is the one users run.
var runnerRoot = sync.OnceValues(func() (string, error) { return imagebuild.RunnerRoot("../..") })

// guest is one Debian VM run by an in-process vm-runner: Run with a
// context that ends as vm-runner's SIGTERM handler ends it.
type guest struct {
	t                         testing.TB
	dir, runtime, disk, iso   string
	config, templates, output string
	qemu                      string
	spicePort                 int
	rec                       *statusrecorder.Recorder
	cancel                    context.CancelFunc
	done                      chan error
	started                   time.Time
}

func newGuest(t testing.TB) *guest {
	t.Helper()
	prereq.Commands(t, "swtpm, genisoimage, e2fsprogs", "swtpm", "genisoimage", "e2fsck", "debugfs")
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "deb")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	g := &guest{t: t, dir: dir, runtime: filepath.Join(dir, "run"), config: filepath.Join(dir, "etc", "config.yaml"),
		templates: filepath.Join(dir, "templates"), spicePort: freeport.Get(t)}
	g.disk = debianguest.Disk(t, dir)
	root, err := runnerRoot()
	require.NoError(t, err)
	g.qemu = filepath.Join(dir, "qemu")
	require.NoError(t, os.WriteFile(g.qemu, []byte(strings.ReplaceAll(imagebuild.RunnerQemuScript, "ROOT", root)), 0o755))
	for _, d := range []string{"etc", "templates", "iso"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	std, _, err := templates.Read(templates.Standard)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(g.templates, templates.Standard), append(std, testTemplate...), 0o644))
	// A CD image with one file, for the CD tests.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "iso", "hello.txt"), []byte("hello from the CD\n"), 0o644))
	g.iso = filepath.Join(dir, "hello.iso")
	out, err := exec.Command("genisoimage", "-quiet", "-R", "-V", "HELLO", "-o", g.iso, filepath.Join(dir, "iso")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return g
}

// write replaces the config as a ConfigMap volume does: a new file renamed
// over the old one. DIR, DISK, ISO and SPICEPORT are filled in.
func (g *guest) write(config string) {
	g.t.Helper()
	r := strings.NewReplacer("DIR", g.dir, "DISK", g.disk, "ISO", g.iso, "SPICEPORT", fmt.Sprint(g.spicePort))
	tmp := g.config + ".tmp"
	require.NoError(g.t, os.WriteFile(tmp, []byte(r.Replace(config)), 0o644))
	require.NoError(g.t, os.Rename(tmp, g.config))
}

// start runs the runner until stop.
func (g *guest) start() {
	g.t.Helper()
	g.output = filepath.Join(g.dir, fmt.Sprintf("runner-%d.log", time.Now().UnixNano()))
	out, err := os.Create(g.output)
	require.NoError(g.t, err)
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, err := runner.New(runner.Options{ConfigFile: g.config, TemplateDirs: []string{g.templates}, Qemu: g.qemu, Logger: log, QemuOutput: out,
		TemplateHelper: vmopbin.Build(g.t, runner.TemplateHelper)})
	require.NoError(g.t, err)
	g.rec = &statusrecorder.Recorder{}
	r.UseReporter(g.rec)
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel, g.done, g.started = cancel, make(chan error, 1), time.Now()
	go func() {
		g.done <- r.Run(ctx)
		out.Close()
	}()
	g.t.Cleanup(func() {
		cancel()
		select {
		case err := <-g.done:
			g.t.Logf("vm-runner ended: %v", err)
		case <-time.After(90 * time.Second):
		}
		if g.t.Failed() {
			b, _ := os.ReadFile(g.output)
			g.t.Logf("vm-runner output:\n%s", tail(string(b), 60))
			g.t.Logf("serial console:\n%s", tail(g.console(), 40))
		}
	})
}

// stop shuts the guest down as SIGTERM does and returns how the runner
// ended and how long it took.
func (g *guest) stop() (time.Duration, error) {
	g.t.Helper()
	start := time.Now()
	g.cancel()
	select {
	case err := <-g.done:
		g.done <- err // for the cleanup
		return time.Since(start), err
	case <-time.After(120 * time.Second):
		g.t.Fatal("vm-runner did not end within 120 s of its stop")
		return 0, nil
	}
}

// runnerLog is what the runner logged in its last run.
func (g *guest) runnerLog() string {
	b, _ := os.ReadFile(g.output)
	return string(b)
}

func (g *guest) console() string {
	b, _ := serialconsole.ReadHistory(g.runtime)
	return string(b)
}

// waitStatus waits until the runner has reported a status that ok accepts,
// as its report number from or later, and returns it.
func (g *guest) waitStatus(from int, timeout time.Duration, what string, ok func(runner.Status) bool) runner.Status {
	g.t.Helper()
	var s runner.Status
	eventually.Within(g.t, timeout, func() string {
		var found bool
		if s, found = g.rec.Find(from, ok); !found {
			return "no status reported with " + what
		}
		return ""
	})
	return s
}

// booted waits for the agent to be connected and to report the guest.
func (g *guest) booted() runner.Status {
	g.t.Helper()
	return g.waitStatus(0, 4*time.Minute, "the guest agent's info", func(s runner.Status) bool {
		return s.Booted && s.Guest.Hostname != ""
	})
}

// sh runs a shell script in the guest through its agent and returns its
// output; the script must succeed.
func (g *guest) sh(script string) string {
	g.t.Helper()
	out, err := g.trySh(script)
	require.NoError(g.t, err)
	return out
}

func (g *guest) trySh(script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := guestagent.Dial(ctx, filepath.Join(g.runtime, "guest-agent.sock"))
	if err != nil {
		return "", err
	}
	defer c.Close()
	res, err := c.Exec(ctx, "/bin/sh", []string{"-c", script}, nil)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return string(res.Stdout), fmt.Errorf("in the guest, %q exited with %d: %s%s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return string(res.Stdout), nil
}

// waitSh runs script until its output, trimmed, is want. Every command
// costs the emulated guest: it runs at most once a second.
func (g *guest) waitSh(timeout time.Duration, script, want string) {
	g.t.Helper()
	eventually.Within(g.t, timeout, func() string {
		out, err := g.trySh(script)
		if got := strings.TrimSpace(out); err != nil || got != want {
			time.Sleep(time.Second)
			if err != nil {
				return err.Error()
			}
			return fmt.Sprintf("%q says %q, want %q", script, got, want)
		}
		return ""
	})
}

// cloudInitDone waits for cloud-init's last stage to end (its result file;
// cloud-init's own status command is a Python program, slow under TCG)
// and requires that cloud-init itself says it is done, without errors.
func (g *guest) cloudInitDone() {
	g.t.Helper()
	g.waitSh(3*time.Minute, "test -e /run/cloud-init/result.json && echo yes", "yes")
	out, err := g.trySh("cloud-init status --long")
	require.NoError(g.t, err, "cloud-init status:\n%s", out)
	require.Contains(g.t, out, "status: done")
}

// monitor connects to the test's QMP socket.
func (g *guest) monitor() *qmp.Monitor {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mon, err := qmp.Dial(ctx, filepath.Join(g.runtime, "test.sock"))
	require.NoError(g.t, err)
	g.t.Cleanup(func() { mon.Close() })
	return mon
}

// cdDrive is qemu's view of the first CD drive.
func cdDrive(ctx context.Context, mon *qmp.Monitor) (qmp.BlockInfo, error) {
	blocks, err := mon.QueryBlock(ctx)
	if err != nil {
		return qmp.BlockInfo{}, err
	}
	for _, b := range blocks {
		if b.Device == runner.CDROMID(0)+"-drive" {
			return b, nil
		}
	}
	return qmp.BlockInfo{}, errors.New("no CD drive")
}

// cdMedium is the file in the first CD drive, "" when empty.
func cdMedium(ctx context.Context, mon *qmp.Monitor) (string, error) {
	b, err := cdDrive(ctx, mon)
	if err != nil || b.Inserted == nil {
		return "", err
	}
	return b.Inserted.File, nil
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}
