// Package statusrecorder is a runner.Reporter for tests that run the
// runner in-process: it keeps every status the runner reports.
package statusrecorder

import (
	"context"
	"slices"
	"sync"

	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// Recorder keeps the statuses in the order reported; its zero value is
// ready.
type Recorder struct {
	mu       sync.Mutex
	statuses []runner.Status
}

// Report keeps s.
func (r *Recorder) Report(_ context.Context, s runner.Status) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.statuses = append(r.statuses, s)
}

// SetStopped does nothing: no VM's desired state to change.
func (*Recorder) SetStopped(context.Context) error { return nil }

// Find returns the first status from report number from on that ok
// accepts.
func (r *Recorder) Find(from int, ok func(runner.Status) bool) (runner.Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from = min(from, len(r.statuses))
	i := slices.IndexFunc(r.statuses[from:], ok)
	if i < 0 {
		return runner.Status{}, false
	}
	return r.statuses[from+i], true
}

// Count is the number of reports so far.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.statuses)
}

// Last is the latest status; zero before the first report.
func (r *Recorder) Last() runner.Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.statuses) == 0 {
		return runner.Status{}
	}
	return r.statuses[len(r.statuses)-1]
}
