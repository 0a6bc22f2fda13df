package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"time"
)

const (
	// qmpPing is how often the runner asks qemu over its monitor whether
	// it is alive, and how long it waits for the answer.
	qmpPing = 10 * time.Second
	// qmpMisses unanswered asks in a row make qemu hung if it is also
	// stopped or stuck in the kernel: a qemu that runs can leave its
	// monitor unanswered for minutes (a TPM command waiting for swtpm
	// under TCG holds its main loop) and is healthy.
	qmpMisses = 3
	// qmpDeadMisses unanswered asks in a row make qemu hung whatever its
	// state: a deadlocked qemu sleeps (seen under TCG: the SPICE display's
	// refresh waiting on the vCPU while the vCPU, resetting virtio-gpu,
	// waits on the main loop), and would hold its guest forever.
	qmpDeadMisses = 30
)

// watchQemu asks qemu over its monitor every r.qmpPing; after qmpMisses
// asks in a row without an answer, a qemu that is stopped (SIGSTOP) or
// stuck in the kernel (state D) is hung, and so is any qemu after
// qmpDeadMisses; its guest lost either way, it is killed, so that the
// runner exits and the kubelet starts the VM again. A guest that hangs
// does not count: qemu still answers for it. It ends with ctx or qemu.
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
		how := "stopped, or stuck in the host"
		if st := procState(r.qemu.cmd.Process.Pid); st != 'T' && st != 't' && st != 'D' {
			if misses < qmpDeadMisses {
				r.log.Warn("qemu does not answer its monitor but is neither stopped nor stuck: left running for now", "state", string(st))
				continue
			}
			how = "deadlocked, or busy for too long"
		}
		why := fmt.Sprintf("qemu did not answer its monitor for %s (%s): it was killed", time.Duration(misses)*r.qmpPing, how)
		r.hung.Store(&why)
		r.qemu.kill()
		return
	}
}

// procState is the state letter of process pid (/proc/PID/stat: R, S, D,
// T...); 0 when it cannot be read.
func procState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	// The command name, in parentheses, may hold spaces: the state
	// follows its closing one.
	i := bytes.LastIndexByte(b, ')')
	if err != nil || i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}
