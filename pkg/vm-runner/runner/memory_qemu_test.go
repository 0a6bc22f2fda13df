package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/procmem"
	"github.com/vmop/vmop/test/harness/testguest"
)

// podVM is test/node's guest VM as its pod's runner gets it: 512 MiB, 1
// of 2 vCPUs, the test guest's disk, an empty CD drive and a display.
const podVM = `
firmware: bios
powerdownTimeout: 60
maximumCpus: 2
currentCpus: 1
maximumRam: 512Mi
currentRam: 512Mi
drives:
- type: raw
  file: DIR/disk.img
- type: ide-cd
display:
  spice:
    port: SPICEPORT
`

// BenchmarkMemory is what a VM's runner and qemu hold beyond the guest's
// RAM once the test guest has booted (podVM), qemu's part split into the
// guest's RAM, TCG's translation cache and the rest (files: qemu's binary
// and libraries). It runs the host's qemu and the runner image's
// (qemu=image, what pods run) with the -accel the runner writes
// (accel=runner), qemu's default TCG cache (accel=tcg: up to 1 GiB),
// smaller caches (tb-size in MiB), and KVM where there is /dev/kvm: with
// kvm_pvm the guest does not boot, but what qemu holds outside the
// guest's RAM is there from its start.
func BenchmarkMemory(b *testing.B) {
	requireTools(b)
	accels := []string{"", "tcg", "tcg,tb-size=64", "tcg,tb-size=32", "tcg,tb-size=16", "kvm"}
	for _, q := range []string{"host", "image"} {
		for _, accel := range accels {
			name := "qemu=" + q + "/accel=" + accel
			if accel == "" {
				name = "qemu=" + q + "/accel=runner"
			}
			b.Run(name, func(b *testing.B) {
				if accel == "kvm" && !kvmDevice() {
					b.Skip("no /dev/kvm")
				}
				qemu := ""
				if q == "image" {
					qemu = imageQemu(b)
				}
				var m vmMemory
				for b.Loop() {
					m = measureMemory(b, qemu, accel)
				}
				m.report(b)
			})
		}
	}
}

func kvmDevice() bool {
	_, err := os.Stat("/dev/kvm")
	return err == nil
}

// imageQemu is a script that runs the runner image's qemu on this host
// with the image's own loader, libraries, modules and firmware.
func imageQemu(b *testing.B) string {
	prereq.Commands(b, "mmdebstrap (the runner image's root)", "mmdebstrap")
	root, err := imagebuild.RunnerRoot("../../..")
	require.NoError(b, err)
	script := filepath.Join(b.TempDir(), "qemu")
	require.NoError(b, os.WriteFile(script, []byte(strings.ReplaceAll(imagebuild.RunnerQemuScript, "ROOT", root)), 0o755))
	return script
}

// vmMemory is a VM's memory, in bytes, and how long its guest took to
// boot.
type vmMemory struct {
	qemu, guest, cache, files int64
	runner, runnerPSS         int64
	jitCode, jitFlushes       int64
	boot                      time.Duration
}

func (m vmMemory) report(b *testing.B) {
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(mib(m.qemu), "MiB-qemu-rss")
	b.ReportMetric(mib(m.guest), "MiB-guest-ram")
	b.ReportMetric(mib(m.cache), "MiB-tcg-cache")
	b.ReportMetric(mib(m.qemu-m.guest), "MiB-qemu-beyond-guest")
	b.ReportMetric(mib(m.qemu-m.guest-m.cache), "MiB-qemu-beyond-guest-and-cache")
	b.ReportMetric(mib(m.files), "MiB-qemu-files")
	b.ReportMetric(mib(m.runner), "MiB-runner-rss")
	b.ReportMetric(mib(m.runnerPSS), "MiB-runner-pss")
	b.ReportMetric(mib(m.jitCode), "MiB-tcg-code")
	b.ReportMetric(float64(m.jitFlushes), "tcg-flushes")
	b.ReportMetric(m.boot.Seconds(), "s-boot")
	b.ReportMetric(0, "ns/op")
}

// measureMemory boots the test guest with qemu (the host's when empty)
// and accel on the template's -accel line (the runner's own when empty),
// and reads the memory of qemu and the runner.
func measureMemory(b *testing.B, qemu, accel string) vmMemory {
	b.StopTimer()
	defer b.StartTimer()
	v := newVM(b, podVM)
	v.qemu = qemu
	disk, err := os.ReadFile(testguest.Disk(b))
	require.NoError(b, err)
	require.NoError(b, os.WriteFile(filepath.Join(v.dir, "disk.img"), disk, 0o644))
	if accel != "" {
		path := filepath.Join(v.dir, "templates", templates.Standard)
		tmpl, err := os.ReadFile(path)
		require.NoError(b, err)
		line := "-accel " + accel + "\n"
		i := strings.Index(string(tmpl), "-accel ")
		require.NotEqual(b, -1, i, "no -accel line in the template")
		end := i + strings.IndexByte(string(tmpl[i:]), '\n') + 1
		text := string(tmpl[:i]) + line + string(tmpl[end:])
		if accel == "kvm" {
			// The runner's "host", less what kvm_pvm refuses to set (MSR
			// 0x10a).
			text = strings.Replace(text, "-cpu {{opt .CPUModel}}", "-cpu host,-arch-capabilities", 1)
		}
		require.NoError(b, os.WriteFile(path, []byte(text), 0o644))
	}
	start := time.Now()
	mon := v.start()
	var m vmMemory
	if accel == "kvm" {
		// kvm_pvm runs no unmodified guest to its end: qemu's own part
		// is there once the guest runs.
		waitRunning(b, mon)
		time.Sleep(10 * time.Second)
	} else {
		waitRunning(b, mon)
		v.waitConsole(testguest.ReadyLine, 3*time.Minute)
		m.boot = time.Since(start)
		if jit, err := mon.HumanMonitorCommand(b.Context(), "info jit"); err == nil {
			m.jitCode, _, m.jitFlushes = procmem.JIT(jit)
		}
	}
	// What the runner does once the guest is up (the agent's first
	// answers, status) is done by then.
	time.Sleep(3 * time.Second)
	// The image's qemu runs as its loader (imageQemu).
	pid := childNamed(b, v, map[bool]string{true: "qemu", false: "ld-linux"}[qemu == ""])
	require.NotZero(b, pid, "no qemu child of the runner")
	q, err := procmem.ReadQemu(pid, 512<<20)
	require.NoError(b, err)
	m.qemu, m.guest, m.cache, m.files = q.RSS, q.Guest, q.Cache, q.Files
	m.runner, m.runnerPSS, err = procmem.Rollup(v.cmd.Process.Pid)
	require.NoError(b, err)
	return m
}
