package eventually

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	calls := 0
	err := Until(t.Context(), 10*time.Second, func(context.Context) error {
		calls++
		if calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("Until: %v after %d calls, want nil after 3", err, calls)
	}

	start := time.Now()
	err = Until(t.Context(), 300*time.Millisecond, func(context.Context) error { return errors.New("never") })
	if err == nil || err.Error() != "never" {
		t.Fatalf("Until: %v, want the last error", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond || d > 5*time.Second {
		t.Fatalf("Until gave up after %v, want the 300ms timeout", d)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := Until(ctx, time.Minute, func(context.Context) error { return errors.New("canceled") }); err == nil {
		t.Fatal("Until: nil on a canceled context")
	}

	exited := make(chan struct{})
	close(exited)
	start = time.Now()
	if err := UntilExit(t.Context(), exited, time.Minute, func(context.Context) error { return errors.New("gone") }); err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("UntilExit: %v after %v, want the error at once once exited", err, time.Since(start))
	}
}
