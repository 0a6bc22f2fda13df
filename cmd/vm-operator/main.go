// Command vm-operator is vmop's in-cluster controller; the logic is in
// pkg/vm-operator/app and pkg/vm-operator/controller.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/vmop/vmop/pkg/vm-operator/app"
)

func main() {
	// The informer caches are most of the heap and change slowly: collect
	// at half the default growth, for a smaller RSS at little CPU cost.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(50)
	}
	// SIGTERM ends the work gracefully: reconciles in progress finish and
	// the Lease is released for a standby replica.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.NewCmd(os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "vm-operator:", err)
		os.Exit(1)
	}
}
