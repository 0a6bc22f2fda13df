package reporter_test

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/reporter"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// How vm-runner reports only when it runs in a pod.
func ExampleInCluster() {
	log := slog.Default()
	var opts runner.Options
	rep, err := reporter.InCluster("test-vm", log)
	switch {
	case errors.Is(err, reporter.ErrNotInCluster):
		// Stand-alone: no status to report.
	case err != nil:
		log.Warn("Cannot report the VM's status", "err", err)
	default:
		opts.Reporter = rep
		defer func() {
			// The runner's context is cancelled by now: use a new one.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rep.Stop(ctx); err != nil {
				log.Warn("Cannot write the final status", "err", err)
			}
		}()
	}
	// runner.New(opts) and Run follow.
}
