package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/importer"
)

// importDisks is vm-runner import, the init container of a VM pod whose
// disks name a source image: it fills those that are empty, once.
func importDisks(args []string) int {
	flags := pflag.NewFlagSet("vm-runner import", pflag.ContinueOnError)
	flags.Usage = func() {
		fmt.Fprintf(os.Stderr, "Usage: vm-runner import [-c config.yaml] [--scratch DIR]\n\n"+
			"Fills each drive of the config that names a source image, while it is empty and\n"+
			"once only, before the runner starts the VM.\n\nFlags:\n%s", flags.FlagUsages())
	}
	config := flags.StringP("config", "c", runnerconfig.ConfigDir+"/"+runnerconfig.ConfigFile, "the runner's config file")
	scratch := flags.String("scratch", runnerconfig.ImportScratchDir, "where a download is staged (not the root file system)")
	qemuImg := flags.String("qemu-img", "qemu-img", "the qemu-img program")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		return runnerconfig.ExitConfig
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	c, err := runnerconfig.Load(*config)
	if err != nil {
		log.Error("Cannot read the config", "err", err)
		terminationMessage(err)
		return runnerconfig.ExitConfig
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	opts := importer.Options{Config: c, ScratchDir: *scratch, QemuImg: *qemuImg, Log: log}
	if rep := inCluster(c.VM.Name, log); rep != nil {
		opts.Reporter = rep
		defer stopReporting(rep.StopEvents, "the import's events", log)
	}
	log.Info("Importing disks", "version", version.Get(), "config", *config)
	if err := importer.Run(ctx, opts); err != nil {
		log.Error("Cannot import", "err", err)
		terminationMessage(err)
		return runnerconfig.ExitImport
	}
	return 0
}
