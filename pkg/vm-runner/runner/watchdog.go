package runner

import (
	"context"
	"fmt"
	"time"
)

const (
	// qmpPing is how often the runner asks qemu over its monitor whether
	// it is alive, and how long it waits for the answer.
	qmpPing = 5 * time.Second
	// qmpMisses unanswered asks in a row make qemu hung.
	qmpMisses = 3
)

// watchQemu asks qemu over its monitor every r.qmpPing; after qmpMisses
// asks in a row without an answer, qemu is hung (stopped, or stuck in the
// host: its guest is lost either way) and is killed, so that the runner
// exits and the kubelet starts the VM again. A guest that hangs does not
// count: qemu still answers for it. It ends with ctx or qemu.
func (r *Runner) watchQemu(ctx context.Context) {
	t := time.NewTicker(r.qmpPing)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.qemu.done:
			return
		case <-t.C:
		}
		ask, cancel := context.WithTimeout(ctx, r.qmpPing)
		_, err := r.mon.QueryStatus(ask)
		cancel()
		switch {
		case ctx.Err() != nil || r.qemu.exited():
			return
		case err == nil:
			misses = 0
			continue
		}
		misses++
		r.log.Warn("qemu does not answer its monitor", "misses", misses, "err", err)
		if misses < qmpMisses {
			continue
		}
		why := fmt.Sprintf("qemu did not answer its monitor for %s (stopped, or stuck in the host): it was killed", time.Duration(misses)*r.qmpPing)
		r.hung.Store(&why)
		r.qemu.kill()
		return
	}
}
