package debian_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
	"github.com/vmop/vmop/test/harness/procmem"
)

// BenchmarkTCGCache boots the Debian guest (SeaBIOS, 1 vCPU, 1 GiB, TCG on
// the runner image's qemu) until cloud-init is done, with qemu's own
// translation cache (tb-size=qemu: an eighth of the host's memory, at
// most 1 GiB), with 64 MiB and with the runner's (runner.TCGCacheMiB). It reports the
// code qemu generated, its cache flushes, qemu's CPU seconds (less
// sensitive to the machine's load than the boot's time), and what qemu
// holds beyond the guest's RAM, the cache's part of it included.
func BenchmarkTCGCache(b *testing.B) {
	for _, size := range []string{"qemu", "64", "runner"} {
		b.Run("tb-size="+size, func(b *testing.B) {
			var m cacheRun
			for b.Loop() {
				m = bootForCache(b, size)
			}
			b.ReportMetric(float64(m.code)/(1<<20), "MiB-tcg-code")
			b.ReportMetric(float64(m.flushes), "tcg-flushes")
			b.ReportMetric(m.cpu, "s-qemu-cpu")
			b.ReportMetric(float64(m.mem.Cache)/(1<<20), "MiB-tcg-cache")
			b.ReportMetric(float64(m.mem.Beyond(true))/(1<<20), "MiB-qemu-beyond-guest")
			b.ReportMetric(float64(m.mem.Guest)/(1<<20), "MiB-guest-ram")
			b.ReportMetric(0, "ns/op")
		})
	}
}

type cacheRun struct {
	code, flushes int64
	cpu           float64
	mem           procmem.Qemu
}

// bootForCache boots the guest with the cache of size: "qemu" (its
// default), "runner" (the runner's) or a size in MiB.
func bootForCache(b *testing.B, tbSize string) cacheRun {
	b.StopTimer()
	defer b.StartTimer()
	g := newGuest(b)
	if tbSize != "runner" {
		path := filepath.Join(g.templates, templates.Standard)
		tmpl, err := os.ReadFile(path)
		require.NoError(b, err)
		const opts = "{{if .TCGCacheMiB}},tb-size={{.TCGCacheMiB}}{{end}}"
		require.Contains(b, string(tmpl), opts)
		opt := ""
		if tbSize != "qemu" {
			opt = ",tb-size=" + tbSize
		}
		require.NoError(b, os.WriteFile(path, []byte(strings.Replace(string(tmpl), opts, opt, 1)), 0o644))
	}
	g.write(biosVM(1, 1, "1Gi", ""))
	g.start()
	// Longer than the tests wait: the figure is wanted on a busy machine
	// too.
	g.waitStatus(0, 15*time.Minute, "the guest agent's info", func(s runner.Status) bool { return s.Booted && s.Guest.Hostname != "" })
	g.waitSh(10*time.Minute, "test -e /run/cloud-init/result.json && echo yes", "yes")
	var m cacheRun
	info, err := g.monitor().HumanMonitorCommand(b.Context(), "info jit")
	require.NoError(b, err)
	var size int64
	m.code, size, m.flushes = procmem.JIT(info)
	pid := qemuChild(b, g.runtime)
	m.cpu, err = procmem.CPUSeconds(pid)
	require.NoError(b, err)
	m.mem, err = procmem.ReadQemu(pid, 1<<30)
	require.NoError(b, err)
	_, err = g.stop()
	require.NoError(b, err)
	if tbSize == "runner" {
		// qemu keeps a few pages of it for itself.
		require.InDelta(b, runner.TCGCacheMiB<<20, size, 1<<20, "the runner's cache size")
	}
	return m
}

// qemuChild is this process's child that runs qemu with runtime, the
// runner's directory (it runs as the image's loader).
func qemuChild(b *testing.B, runtime string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		cmd, _ := os.ReadFile(p)
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 && f[1] == fmt.Sprint(os.Getpid()) && strings.Contains(string(cmd), runtime) {
			var pid int
			_, _ = fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			return pid
		}
	}
	b.Fatal("no qemu child with " + runtime)
	return 0
}
