package runner_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"

	"github.com/stretchr/testify/require"
)

// BenchmarkStartToExec is the time from starting vm-runner to its exec of
// qemu, without TPM and cloud-init (the target is under 50 ms). A stand-in
// qemu notes the time and exits.
func BenchmarkStartToExec(b *testing.B) {
	requireTools(b)
	dir := b.TempDir()
	marker := filepath.Join(dir, "exec")
	fake := filepath.Join(dir, "qemu")
	require.NoError(b, os.WriteFile(fake, []byte("#!/bin/sh\ndate +%s%N > "+marker+"\n"), 0o755))
	config := filepath.Join(dir, "config.yaml")
	require.NoError(b, os.WriteFile(config, []byte(fmt.Sprintf(`"/Runner":
  dataDir: %[1]s/data
  runtimeDir: %[1]s/run
  vm: {name: bench, firmware: bios, maximumCpus: 4, maximumRam: 1Gi, display: {spice: {port: 5999}}}
`, dir)), 0o644))
	bin := vmRunner(b)
	var total time.Duration
	for b.Loop() {
		os.Remove(marker)
		start := time.Now()
		_ = exec.Command(bin, "-c", config, "--qemu", fake).Run()
		b.StopTimer()
		stamp, err := os.ReadFile(marker)
		require.NoError(b, err)
		ns, err := strconv.ParseInt(strings.TrimSpace(string(stamp)), 10, 64)
		require.NoError(b, err)
		total += time.Unix(0, ns).Sub(start)
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms-to-exec")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkLiveChanges times a CPU hot-plug and a CD change, from writing
// the config to qemu showing the change, and reports the runner's own
// memory while the VM runs (the target is under 20 MiB).
func BenchmarkLiveChanges(b *testing.B) {
	const maxCPUs = 64
	config := strings.Replace(firmwareVM, "maximumCpus: 4", fmt.Sprintf("maximumCpus: %d", maxCPUs), 1)
	v := newVM(b, config)
	mon := v.start()
	waitRunning(b, mon)
	ctx := b.Context()
	cpus, cd := 1, "a.iso"
	var plug, change time.Duration
	for b.Loop() {
		if cpus == maxCPUs {
			b.Fatal("out of CPU slots: run with a smaller -benchtime")
		}
		cpus++
		cfg := strings.Replace(config, "currentCpus: 1", fmt.Sprintf("currentCpus: %d", cpus), 1)
		start := time.Now()
		v.writeConfig(cfg)
		eventually.Succeeds(b, 10*time.Second, func() error {
			n, err := pluggedCPUs(ctx, mon)
			if err == nil && n != cpus {
				err = fmt.Errorf("%d CPUs", n)
			}
			return err
		})
		plug += time.Since(start)

		cd = map[string]string{"a.iso": "b.iso", "b.iso": "a.iso"}[cd]
		start = time.Now()
		v.writeConfig(strings.Replace(cfg, "a.iso", cd, 1))
		eventually.Succeeds(b, 10*time.Second, func() error {
			m, err := cdMedium(ctx, mon, "cd0")
			if err == nil && m != filepath.Join(v.dir, cd) {
				err = fmt.Errorf("medium %q", m)
			}
			return err
		})
		change += time.Since(start)
	}
	b.ReportMetric(float64(plug.Microseconds())/float64(b.N)/1000, "ms-cpu-plug")
	b.ReportMetric(float64(change.Microseconds())/float64(b.N)/1000, "ms-cd-change")
	b.ReportMetric(float64(rssKiB(b, v.cmd.Process.Pid))/1024, "MiB-runner-RSS")
	b.ReportMetric(0, "ns/op")
}

// rssKiB reads a process's resident memory.
func rssKiB(t testing.TB, pid int) int {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			n, err := strconv.Atoi(strings.Fields(rest)[0])
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
