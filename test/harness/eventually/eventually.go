// Package eventually waits, in tests and the harness, for a state that
// real processes reach in their own time: the one polling loop of the
// tests.
package eventually

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The state is checked at once, then after firstInterval, then twice as
// long each time up to maxInterval: fast for unit tests whose state comes
// within milliseconds, rare enough that checks which run kubectl do not
// load the machine.
const (
	firstInterval = 10 * time.Millisecond
	maxInterval   = 200 * time.Millisecond
)

// Until calls ready until it returns nil, ctx is done or timeout has
// passed, and then returns ready's last error (nil once ready). It is for
// harness code that reports errors rather than failing a test.
func Until(ctx context.Context, timeout time.Duration, ready func(context.Context) error) error {
	return UntilExit(ctx, nil, timeout, ready)
}

// UntilExit is Until that also gives up when exited is closed: the
// process that was to become ready has ended.
func UntilExit(ctx context.Context, exited <-chan struct{}, timeout time.Duration, ready func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	interval := firstInterval
	for {
		err := ready(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-exited:
			return err
		case <-time.After(interval):
		}
		interval = min(2*interval, maxInterval)
	}
}

// Succeeds calls f until it returns nil or timeout has passed, then fails
// t with f's last error. f may end t itself (t.Fatal) when waiting longer
// is pointless, e.g. when the awaited process has exited.
func Succeeds(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	if err := Until(context.WithoutCancel(t.Context()), timeout, func(context.Context) error { return f() }); err != nil {
		t.Fatalf("not within %v: %v", timeout, err)
	}
}

// Within calls cond until it returns "" or timeout has passed, then fails t
// with cond's last complaint.
func Within(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	Succeeds(t, timeout, func() error {
		if msg := cond(); msg != "" {
			return errors.New(msg)
		}
		return nil
	})
}
