//go:build linux

package qmp

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkQueryStatus measures a command round trip to a real qemu (TCG,
// paused): go-qemu's write, qemu's dispatch, the reply and JSON decoding.
func BenchmarkQueryStatus(b *testing.B) {
	m := startQEMU(b, qemuOpts{}).dial(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.QueryStatus(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCPUHotplug measures device_add of one CPU into a free slot of a
// paused VM, as the runner does before cont. A VM offers 63 free slots; the
// timer stops while a fresh VM starts.
func BenchmarkCPUHotplug(b *testing.B) {
	const maxCPUs = 64
	ctx := context.Background()
	var (
		q    *testQEMU
		m    *Monitor
		free []HotpluggableCPU
	)
	next := func() {
		if q != nil {
			m.Close()
			q.stop()
		}
		q = startQEMU(b, qemuOpts{maxCPUs: maxCPUs})
		m = q.dial(b)
		cpus, err := m.QueryHotpluggableCPUs(ctx)
		if err != nil {
			b.Fatal(err)
		}
		free = free[:0]
		for _, c := range cpus {
			if !c.Plugged() {
				free = append(free, c)
			}
		}
	}
	i := 0
	for b.Loop() {
		if len(free) == 0 {
			b.StopTimer()
			next()
			b.StartTimer()
		}
		i++
		if err := m.AddCPU(ctx, free[0], fmt.Sprintf("cpu-%d", i)); err != nil {
			b.Fatal(err)
		}
		free = free[1:]
	}
}
