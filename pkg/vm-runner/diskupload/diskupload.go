// Package diskupload is the receiving end of "kubectl vm disk upload":
// "vm-runner disk receive" in the uploader pod reads the image from its
// stdin (pods/exec) and fills the disk with pkg/vm-runner/diskimport, under the
// same records and rule (diskimport.Decide) as the VM's own import, so
// that an upload and an import never write over each other's disk.
//
// What the receiver tells the plugin: progress lines on stdout
// (runnerexec.ProgressLine), the reason of a failure on stderr, and its exit code;
// ExitNeedsForce when the disk is left alone because it holds data.
package diskupload

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/vmop/vmop/pkg/runnerexec"
	"github.com/vmop/vmop/pkg/vm-runner/diskfile"
	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
)

// Exit codes of the receiver.
const (
	ExitFailed = 1
	ExitUsage  = 2
	// ExitNeedsForce: the disk holds data, or was filled before, and
	// --force was not given; nothing was written.
	ExitNeedsForce = 3
)

// SourcePrefix starts the source of an upload's record.
const SourcePrefix = "upload:"

// Options are what to receive and where to put it.
type Options struct {
	// Disk is the disk's volume name (root-disk): its record's name.
	Disk string
	// Device is the disk: a block device, or the image file of a
	// Filesystem claim when ClaimSize is set (a regular file in tests).
	Device string
	// ClaimSize, for an image file, is its claim's size: the file is made
	// or grown to it first (see pkg/vm-runner/diskfile).
	ClaimSize int64
	// RecordDir holds the VM's import records; ScratchDir stages the
	// image.
	RecordDir, ScratchDir string
	// Name is the uploaded file's base name, for the record.
	Name string
	// Size is the number of bytes to read; fewer fail, so that a cut-off
	// upload is never taken for a whole image. 0: up to the end of r.
	Size int64
	// Force overwrites a disk that holds data or was filled before.
	Force bool
	// QemuImg is the qemu-img program; "qemu-img" when empty.
	QemuImg string
	// Progress gets the progress lines.
	Progress io.Writer
}

// NeedsForceError is a disk left alone: it holds data, or was filled
// before, and Force was not set.
type NeedsForceError struct {
	Disk string
	// Why says what is known of the data.
	Why string
}

func (e *NeedsForceError) Error() string {
	return fmt.Sprintf("disk %s holds data (%s); --force overwrites it", e.Disk, e.Why)
}

// Check tells whether the disk may be filled: nil, a *NeedsForceError
// or why it cannot be told. Receive checks again; the plugin asks first,
// so that a refusal does not wait for the whole image.
func Check(o Options) error {
	if o.ClaimSize > 0 {
		if _, err := diskfile.Ensure(o.Device, o.ClaimSize); err != nil {
			return err
		}
	}
	rec, err := diskimport.ReadRecord(o.RecordDir, o.Disk)
	if err != nil {
		return err
	}
	empty, err := diskimport.Empty(o.Device)
	if err != nil {
		return err
	}
	switch d := diskimport.Decide(rec, empty, o.Force); {
	case d == diskimport.DecisionImport, o.Force:
		// A user's --force replaces even what the guest wrote since an
		// import (Decide keeps such a disk from an import, not from the
		// user).
		return nil
	case d == diskimport.DecisionDone:
		return &NeedsForceError{Disk: o.Disk, Why: fmt.Sprintf("filled from %s at %s", rec.Source, rec.Finished.UTC().Format(time.RFC3339))}
	default:
		return &NeedsForceError{Disk: o.Disk, Why: "it is not empty, and no upload or import wrote it"}
	}
}

// Receive fills the disk from r when Check allows: it writes the
// Importing record before the first byte goes to the disk and the Done
// record after the image is on it, synced. A receive that was cut off
// leaves the Importing record, which lets the next one write without
// Force.
//
// Whatever happens, r is read to its end (o.Size bytes): in a pod, an
// exec whose process ends with stdin unread never ends (containerd's
// copy into the process's stdin blocks), and the plugin would wait for
// it.
func Receive(ctx context.Context, r io.Reader, o Options) error {
	if o.Size > 0 {
		r = &sizedReader{r: r, left: o.Size}
	}
	err := receive(ctx, r, o)
	if err != nil && ctx.Err() == nil {
		_, _ = io.Copy(io.Discard, r)
	}
	return err
}

func receive(ctx context.Context, r io.Reader, o Options) error {
	if err := Check(o); err != nil {
		return err
	}
	started := time.Now().UTC()
	source := SourcePrefix + o.Name
	if err := diskimport.WriteRecord(o.RecordDir, diskimport.Record{
		Disk: o.Disk, Source: source, State: diskimport.StateImporting, Started: started,
	}); err != nil {
		return err
	}
	res, err := diskimport.Import(ctx, diskimport.Source{Reader: r, Name: source, Size: o.Size}, diskimport.Options{
		Target:     o.Device,
		ScratchDir: o.ScratchDir,
		QemuImg:    o.QemuImg,
		Progress: func(p diskimport.Progress) {
			// The plugin counts what it sends itself.
			if o.Progress != nil && p.Phase != diskimport.PhaseDownloading {
				fmt.Fprintln(o.Progress, runnerexec.ProgressLine(string(p.Phase), p.Done, p.Total))
			}
		},
	})
	if err != nil {
		return err
	}
	return diskimport.WriteRecord(o.RecordDir, diskimport.Record{
		Disk: o.Disk, Source: source, Checksum: "sha256:" + res.SHA256, State: diskimport.StateDone,
		Started: started, Finished: time.Now().UTC(), Format: res.Format, VirtualSize: res.VirtualSize,
	})
}

// sizedReader reads left bytes of r and fails when r ends before.
type sizedReader struct {
	r    io.Reader
	left int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if err == io.EOF && s.left > 0 {
		return n, fmt.Errorf("the upload ended %d bytes short: %w", s.left, io.ErrUnexpectedEOF)
	}
	return n, err
}
