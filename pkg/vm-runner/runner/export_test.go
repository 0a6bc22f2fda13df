package runner

import "time"

// SetBootWait sets how long r waits for the guest agent before it tells
// that the boot is overdue (bootWait), for tests outside the package.
func SetBootWait(r *Runner, d time.Duration) { r.bootWait = d }
