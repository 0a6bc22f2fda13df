// Command vm-node is vmop's node agent; the logic is in pkg/vm-node.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmop/vmop/pkg/vm-node/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.NewCmd(os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "vm-node:", err)
		os.Exit(1)
	}
}
