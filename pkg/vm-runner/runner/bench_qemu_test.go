package runner_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/snapshotpush"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/snapshot"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/procmem"
	"github.com/vmop/vmop/test/harness/testguest"
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
	rss, err := procmem.RSS(v.cmd.Process.Pid)
	require.NoError(b, err)
	b.ReportMetric(float64(rss)/(1<<20), "MiB-runner-RSS")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkSnapshot2GiB: a 2 GiB disk holding 600 MiB of data, copied
// into a snapshot while the guest runs (qemu's backup job to qemu-nbd
// over TLS, as kubectl vm snapshot does), and stopped (vm-runner snapshot
// copy: a stopped VM's snapshot, and a restore). Reports the seconds of
// each, the guest's freeze, and the bytes each copy holds.
func BenchmarkSnapshot2GiB(b *testing.B) {
	dir := b.TempDir()
	disk := filepath.Join(dir, "disk.img")
	const size, data, chunk = 2 << 30, 600 << 20, 10 << 20
	f, err := os.Create(disk)
	require.NoError(b, err)
	require.NoError(b, f.Truncate(size))
	buf := make([]byte, chunk)
	for off := int64(0); off < data/chunk; off++ {
		_, _ = rand.Read(buf)
		_, err := f.WriteAt(buf, off*(size/(data/chunk)))
		require.NoError(b, err)
	}
	require.NoError(b, f.Close())
	v := newGuestVM(b, guestVM+"drives:\n- type: raw\n  resource: "+disk+"\n", testguest.Agent)
	rec := &eventRecorder{}
	result, stop := v.runInProcess(rec)
	defer func() {
		stop()
		require.NoError(b, <-result)
	}()
	rec.wait(b, runner.ReasonBooted)

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	psk := snapshotpush.PSK{Identity: "bench", Key: hex.EncodeToString(key)}
	var online, frozen, stopped, onlineBytes, stoppedBytes float64
	for i := 0; b.Loop(); i++ {
		copyFile := filepath.Join(dir, fmt.Sprintf("online-%d.img", i))
		port := freeport.Get(b)
		srv := snapshot.Server{Address: "127.0.0.1", PSK: psk, Log: io.Discard,
			Exports: []snapshot.Export{{Name: "disk", Path: copyFile, Size: size, Port: port}}}
		halt, served := make(chan struct{}), make(chan error, 1)
		go func() { served <- srv.Serve(b.Context(), halt) }()
		start := time.Now()
		res, err := runner.Push(b.Context(), v.config, snapshotpush.PushRequest{Snapshot: "bench", Host: "127.0.0.1", PSK: psk.String(),
			Exports: []snapshotpush.PushExport{{Disk: "disk.img", Export: "disk", Port: port}}})
		require.NoError(b, err)
		close(halt)
		require.NoError(b, <-served)
		online += time.Since(start).Seconds()
		frozen += res.FrozenSeconds
		onlineBytes += float64(allocated(b, copyFile))

		start = time.Now()
		stoppedFile := filepath.Join(dir, fmt.Sprintf("stopped-%d.img", i))
		_, err = snapshot.Copy(b.Context(), "", copyFile, stoppedFile, 0)
		require.NoError(b, err)
		stopped += time.Since(start).Seconds()
		stoppedBytes += float64(allocated(b, stoppedFile))
		os.Remove(copyFile)
		os.Remove(stoppedFile)
	}
	n := float64(b.N)
	b.ReportMetric(online/n, "s-online")
	b.ReportMetric(frozen/n, "s-frozen")
	b.ReportMetric(onlineBytes/n/(1<<20), "MiB-online-copy")
	b.ReportMetric(stopped/n, "s-stopped-copy")
	b.ReportMetric(stoppedBytes/n/(1<<20), "MiB-stopped-copy")
	b.ReportMetric(0, "ns/op")
}

// allocated is how many bytes of path's blocks are on its file system.
func allocated(b *testing.B, path string) int64 {
	var st syscall.Stat_t
	require.NoError(b, syscall.Stat(path, &st))
	return st.Blocks * 512
}
