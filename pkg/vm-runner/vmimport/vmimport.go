// Package vmimport is a VM's import, what vm-runner import does in the
// init container of a VM's pod: it fills each disk that names a source
// image, while the disk is empty and once only, and tells how it goes in
// the VM's Imported condition and in events, before the runner starts
// qemu. Filling one disk from one image is package diskimport's, which
// the uploader and the containerDisk fetch use too.
package vmimport

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/diskfile"
	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
)

// Reasons of the import's events beside the Imported condition's (see
// v1.ConditionImported).
const (
	// ReasonSourceChanged: a disk imported before names another source
	// now; it is kept, not imported again.
	ReasonSourceChanged = "SourceChanged"
)

// Reporter takes the Imported condition and the events; in a pod,
// reporter.Reporter.
type Reporter interface {
	SetImported(ctx context.Context, c metav1.Condition) error
	Event(ctx context.Context, e runner.Event)
}

// Options are what Run needs.
type Options struct {
	Config *runnerconfig.Config
	// ScratchDir stages downloads (an emptyDir of the pod).
	ScratchDir string
	// QemuImg is the qemu-img program; "qemu-img" when empty.
	QemuImg string
	// Reporter may be nil (stand-alone: the log alone tells).
	Reporter Reporter
	Log      *slog.Logger
	// ProgressEvery bounds how often progress reaches the condition.
	ProgressEvery time.Duration
}

// Run fills the config's drives that name a source, in drive order, and
// stops at the first that fails: its error names the disk and the cause.
func Run(ctx context.Context, opts Options) error {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ProgressEvery == 0 {
		opts.ProgressEvery = 2 * time.Second
	}
	w := newConditionWriter(opts.Reporter, opts.Log)
	defer w.close()
	records := runnerconfig.ImportRecords(opts.Config.DataDir)
	for _, d := range opts.Config.VM.Drives {
		if d.Source == nil || d.Resource == "" {
			continue
		}
		err := fill(ctx, opts, w, records, d)
		if d.Source.ContainerDisk != "" {
			// The copy out of the image is needed no more: the node's
			// disk gets its room back while the VM runs.
			_ = os.Remove(d.Source.File)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// fill imports into one drive if Decide lets it.
func fill(ctx context.Context, opts Options, w *conditionWriter, records string, d runnerconfig.Drive) error {
	disk := d.RecordName()
	src := diskimport.Source{URL: d.Source.URL, File: d.Source.File, Name: d.Source.ContainerDisk, Checksum: d.Source.Checksum}
	log := opts.Log.With("disk", disk, "source", src.String())
	fail := func(err error) error {
		err = fmt.Errorf("disk %s: %w", disk, err)
		w.set(metav1.Condition{Status: metav1.ConditionFalse, Reason: diskimport.Reason(err), Message: err.Error()}, true)
		opts.event(ctx, runner.Event{Warning: true, Reason: v1.ReasonImportFailed, Action: "Import", Message: err.Error()})
		return err
	}
	rec, err := diskimport.ReadRecord(records, disk)
	if err != nil {
		return fail(err)
	}
	if d.ClaimSize > 0 {
		if _, err := diskfile.Ensure(d.Resource, d.ClaimSize); err != nil {
			return fail(err)
		}
	}
	empty, err := diskimport.Empty(d.Resource)
	if err != nil {
		return fail(err)
	}
	switch diskimport.Decide(rec, empty, false) {
	case diskimport.DecisionDone:
		if rec.Source != src.String() {
			msg := fmt.Sprintf("disk %s was imported from %s; it keeps its data and %s is not imported (delete the disk's claim to import anew)", disk, rec.Source, src)
			log.Warn("The source changed after the import; the disk is kept", "imported", rec.Source)
			opts.event(ctx, runner.Event{Warning: true, Reason: ReasonSourceChanged, Action: "Import", Message: msg})
		} else {
			log.Info("Imported before; the disk is kept", "finished", rec.Finished)
		}
		return nil
	case diskimport.DecisionHeldData:
		msg := fmt.Sprintf("disk %s holds data that no import wrote; it is kept and %s is not imported", disk, src)
		log.Warn("The disk holds data; not importing")
		w.set(metav1.Condition{Status: metav1.ConditionTrue, Reason: v1.ReasonDiskHeldData, Message: msg}, true)
		opts.event(ctx, runner.Event{Warning: true, Reason: v1.ReasonDiskHeldData, Action: "Import", Message: msg})
		return nil
	}

	started := time.Now()
	record := diskimport.Record{Disk: disk, Source: src.String(), Checksum: src.Checksum, State: diskimport.StateImporting, Started: started.UTC()}
	if err := diskimport.WriteRecord(records, record); err != nil {
		return fail(err)
	}
	log.Info("Importing")
	w.set(metav1.Condition{Status: metav1.ConditionFalse, Reason: v1.ReasonImporting, Message: fmt.Sprintf("disk %s: importing %s.", disk, src)}, true)
	opts.event(ctx, runner.Event{Reason: v1.ReasonImporting, Action: "Import", Message: fmt.Sprintf("disk %s: importing %s", disk, src)})
	var last time.Time
	res, err := diskimport.Import(ctx, src, diskimport.Options{
		Target:     d.Resource,
		ScratchDir: opts.ScratchDir,
		QemuImg:    opts.QemuImg,
		Progress: func(p diskimport.Progress) {
			if time.Since(last) < opts.ProgressEvery && p.Done != p.Total {
				return
			}
			last = time.Now()
			msg := fmt.Sprintf("disk %s: %s", disk, progressText(p))
			log.Info("Import progress", "phase", p.Phase, "done", p.Done, "total", p.Total)
			w.set(metav1.Condition{Status: metav1.ConditionFalse, Reason: v1.ReasonImporting, Message: msg}, false)
		},
	})
	if err != nil {
		return fail(err)
	}
	record.State, record.Finished = diskimport.StateDone, time.Now().UTC()
	record.Format, record.VirtualSize = res.Format, res.VirtualSize
	if err := diskimport.WriteRecord(records, record); err != nil {
		return fail(err)
	}
	took := time.Since(started)
	msg := fmt.Sprintf("disk %s: imported %s (%s, %s, %s read) in %s", disk, src, res.Format,
		size(res.VirtualSize), size(res.SourceBytes), took.Round(time.Second))
	log.Info("Imported", "format", res.Format, "virtualSize", res.VirtualSize, "sourceBytes", res.SourceBytes, "sha256", res.SHA256, "took", took)
	w.set(metav1.Condition{Status: metav1.ConditionTrue, Reason: v1.ReasonImported, Message: msg + "."}, true)
	opts.event(ctx, runner.Event{Reason: v1.ReasonImported, Action: "Import", Message: msg})
	return nil
}

func (o Options) event(ctx context.Context, e runner.Event) {
	if o.Reporter != nil {
		o.Reporter.Event(ctx, e)
	}
}

// progressText says where a phase stands: "downloading 120Mi of 480Mi
// (25%)", or without a total "downloading 120Mi".
func progressText(p diskimport.Progress) string {
	verb := "downloading"
	if p.Phase == diskimport.PhaseConverting {
		verb = "converting"
	}
	if p.Total <= 0 {
		return fmt.Sprintf("%s %s", verb, size(p.Done))
	}
	return fmt.Sprintf("%s %s of %s (%d%%)", verb, size(p.Done), size(p.Total), p.Done*100/p.Total)
}

// size is a byte count as a person reads it: whole MiB up to 10 GiB.
func size(n int64) string {
	if n >= 10<<30 {
		return v1.FormatBytes(n >> 30 << 30)
	}
	return v1.FormatBytes(n >> 20 << 20)
}

// conditionWriter writes the newest condition in the background, so that
// a slow API server never holds up the import; final conditions are
// waited for.
type conditionWriter struct {
	rep     Reporter
	log     *slog.Logger
	latest  chan metav1.Condition
	flushed chan chan struct{}
	done    chan struct{}
}

func newConditionWriter(rep Reporter, log *slog.Logger) *conditionWriter {
	w := &conditionWriter{rep: rep, log: log, latest: make(chan metav1.Condition, 1), flushed: make(chan chan struct{}), done: make(chan struct{})}
	if rep != nil {
		go w.run()
	} else {
		close(w.done)
	}
	return w
}

func (w *conditionWriter) run() {
	defer close(w.done)
	for {
		select {
		case c, ok := <-w.latest:
			if !ok {
				return
			}
			w.write(c)
		case f := <-w.flushed:
			select {
			case c := <-w.latest:
				w.write(c)
			default:
			}
			close(f)
		}
	}
}

func (w *conditionWriter) write(c metav1.Condition) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.rep.SetImported(ctx, c); err != nil {
		w.log.Warn("Cannot write the Imported condition", "err", err)
	}
}

// set replaces what waits to be written by c; final waits until it is.
func (w *conditionWriter) set(c metav1.Condition, final bool) {
	if w.rep == nil {
		return
	}
	select {
	case <-w.latest:
	default:
	}
	w.latest <- c
	if final {
		f := make(chan struct{})
		w.flushed <- f
		<-f
	}
}

func (w *conditionWriter) close() {
	if w.rep != nil {
		close(w.latest)
	}
	<-w.done
}
