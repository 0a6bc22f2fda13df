package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/qmp"
)

const (
	// diskRetry is how often a guest that qemu paused on a disk's I/O
	// error is let go on (cont), which retries the failed request: once
	// its volume has room again, the guest resumes by itself.
	diskRetry = 10 * time.Second
	// diskSettle: a retried request that fails again pauses the guest at
	// once; a guest that runs this long after cont has resumed.
	diskSettle = 3 * time.Second
)

// DiskPause is a disk whose I/O error made qemu pause the guest (the
// drive's werror/rerror=stop): the guest sees no error and loses nothing.
type DiskPause struct {
	Drive   string // qemu's id: disk0, disk1...
	Index   int    // the drive's index in the config's drives (spec.vm.disks)
	NoSpace bool   // the volume is full (ENOSPC)
	Err     string // qemu's reason, e.g. "No space left on device"
	Since   time.Time
}

// Field is the VirtualMachine's field of the disk.
func (p DiskPause) Field() string { return fmt.Sprintf("spec.vm.disks[%d]", p.Index) }

// String says what stopped the guest and what to do, naming the disk by
// its field.
func (p DiskPause) String() string {
	what, todo := "cannot be read or written ("+p.Err+")", "repair its volume"
	if p.NoSpace {
		what, todo = "is full ("+p.Err+")", "free space on its volume or grow its claim"
	}
	return fmt.Sprintf("The guest is paused: disk %s (%s) %s. To go on, %s: the runner lets the guest retry every %s, "+
		"and it resumes with nothing lost", p.Drive, p.Field(), what, todo, diskRetry)
}

// diskIOError takes qemu's BLOCK_IO_ERROR: a drive that stops the guest
// on errors (all of vmop's disks) paused it. The first error of a pause
// is told; errors of retries only update the reason.
func (r *Runner) diskIOError(ctx context.Context, ev qmp.Event) {
	if action, _ := ev.Data["action"].(string); action != "stop" {
		return
	}
	node, _ := ev.Data["node-name"].(string)
	p := DiskPause{Drive: node, Index: -1, Since: time.Now()}
	p.NoSpace, _ = ev.Data["nospace"].(bool)
	p.Err, _ = ev.Data["reason"].(string)
	for _, d := range r.machine.Disks {
		if d.ID == node {
			p.Index = d.Index
		}
	}
	r.live.diskErrors++
	r.ready.Store(false)
	why := p.String()
	r.paused.Store(&why)
	old := r.status.DiskPause
	if old != nil {
		p.Since = old.Since
		if *old == p {
			return
		}
	}
	r.status.DiskPause = &p
	if old != nil && old.Drive == p.Drive && old.NoSpace == p.NoSpace {
		r.report(ctx)
		return
	}
	// A new pause, or one that moved: the guest went on after a retry and
	// another disk fails now, which the user must mend too.
	r.log.Warn("qemu paused the guest on a disk's I/O error", "drive", p.Drive, "noSpace", p.NoSpace, "reason", p.Err)
	reason := ReasonDiskError
	if p.NoSpace {
		reason = ReasonDiskFull
	}
	r.event(ctx, Event{Warning: true, Reason: reason, Action: actionPause, Message: p.String()})
	r.report(ctx)
}

// retryDisk lets a guest paused on a disk's error go on; it returns the
// number of errors so far, for diskSettled.
func (r *Runner) retryDisk(ctx context.Context) int {
	if err := r.mon.Cont(ctx); err != nil {
		r.log.Error("Letting the paused guest retry its disk's I/O", "err", err)
	}
	return r.live.diskErrors
}

// diskSettled tells whether the guest resumed after retryDisk, which
// returned errors: no new error, and qemu runs it. It tells of the resume.
func (r *Runner) diskSettled(ctx context.Context, errors int) bool {
	p := r.status.DiskPause
	if p == nil {
		return true
	}
	if r.live.diskErrors != errors {
		return false
	}
	st, err := r.mon.QueryStatus(ctx)
	if err != nil || !st.Running {
		return false
	}
	paused := time.Since(p.Since)
	r.status.DiskPause = nil
	r.paused.Store(nil)
	if !r.live.stopping {
		r.ready.Store(true)
	}
	r.log.Info("The guest resumed after its disk's I/O error", "drive", p.Drive, "paused", paused)
	r.event(ctx, Event{Reason: ReasonDiskResumed, Action: actionResume,
		Message: fmt.Sprintf("The guest goes on: disk %s (%s) takes its I/O again (paused for %s)", p.Drive, p.Field(), seconds(paused))})
	r.report(ctx)
	return true
}

// GuestPanicMessage says what a guest's panic left and what to do.
const GuestPanicMessage = "The guest's kernel panicked (its serial console may say why: kubectl vm logs); " +
	"qemu holds it paused as it was, not restarted. To boot it again: kubectl vm reset, or stop and start it"
