// Package eventually waits, in tests against real processes, for a state
// that they reach in their own time.
package eventually

import (
	"testing"
	"time"
)

// interval is how often the state is checked: often enough not to slow
// tests down, rarely enough that checks which run kubectl do not load the
// machine.
const interval = 200 * time.Millisecond

// Within calls cond until it returns "" or timeout has passed, then fails t
// with cond's last complaint.
func Within(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, msg)
		}
		time.Sleep(interval)
	}
}
