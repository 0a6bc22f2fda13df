package app

import (
	"context"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/vmimport"
	"github.com/vmop/vmop/pkg/vmpod"
)

// newImportCmd is vm-runner import, the init container of a VM pod whose
// disks name a source image: it fills those that are empty, once.
func newImportCmd() *cobra.Command {
	var config, scratch, qemuImg string
	cmd := &cobra.Command{
		Use:   "import [-c config.yaml] [--scratch DIR]",
		Short: "Fill the disks that name a source image, once",
		Long: `Fills each drive of the config that names a source image, while it is empty and
once only, before the runner starts the VM.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			c, err := runnerconfig.Load(config)
			if err != nil {
				log.Error("Cannot read the config", "err", err)
				terminationMessage(err)
				return exit(runnerconfig.ExitConfig, nil)
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			opts := vmimport.Options{Config: c, ScratchDir: scratch, QemuImg: qemuImg, Log: log}
			if rep := inCluster(c.VM.Name, log); rep != nil {
				opts.Reporter = rep
				defer stopReporting(rep.StopEvents, "the import's events", log)
			}
			log.Info("Importing disks", "version", version.Get(), "config", config)
			// The node agent gives the unprivileged container its disks.
			if _, err := nodeagent.AskIfServed(ctx, nodeagent.Request{}); err != nil {
				log.Error("Cannot import", "err", err)
				terminationMessage(err)
				return exit(runnerconfig.ExitNodeAgent, nil)
			}
			if err := vmimport.Run(ctx, opts); err != nil {
				log.Error("Cannot import", "err", err)
				terminationMessage(err)
				return exit(runnerconfig.ExitImport, nil)
			}
			return nil
		},
	}
	f := cmd.Flags()
	addConfigFlag(f, &config)
	f.StringVar(&scratch, "scratch", vmpod.ImportScratchDir, "where a download is staged (not the root file system)")
	f.StringVar(&qemuImg, "qemu-img", "qemu-img", "the qemu-img program")
	usageCode(cmd, runnerconfig.ExitConfig)
	return cmd
}
