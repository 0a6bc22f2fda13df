package runner

import (
	"context"
	"fmt"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
)

// Status is what the runner observes of its VM, for the VirtualMachine's
// status.
type Status struct {
	Running bool
	// Booted: the guest agent is connected.
	Booted bool
	// BootOverdue is how long the guest has run without its agent
	// connecting, once that is longer than the runner waits (bootWait);
	// zero before, and once the agent connects.
	BootOverdue time.Duration
	// Guest is what the guest agent reports; zero while it is not connected.
	Guest guestagent.Info
	CPUs  int
	RAM   int64
	// Accelerator is "kvm", or "tcg" without a usable /dev/kvm.
	Accelerator           string
	ConsoleClient         string
	DisplayPasswordSerial int64
	// RestartRequired lists changed fields that apply at the next start.
	RestartRequired []string
	// CDProblems are the CD drives that do not hold the medium the config
	// names, in drive order.
	CDProblems []CDProblem
	// DiskPause is set while qemu holds the guest paused on a disk's I/O
	// error.
	DiskPause *DiskPause
	// GuestPanic: the guest's kernel panicked and qemu holds it paused
	// until a reset or a stop.
	GuestPanic bool
}

// BootOverdueMessage says why the guest is not booted after d, and what
// to look at.
func BootOverdueMessage(d time.Duration) string {
	return fmt.Sprintf("The guest agent has not connected in the %s since the guest started: the guest may be stuck in its boot "+
		"(kubectl vm console shows its screen, kubectl vm logs its serial console) or run no guest agent (qemu-guest-agent); "+
		"it is left running, not restarted", d)
}

// CDProblem is a CD drive without the medium the config names: it could
// not be opened (Err), or the change waits for the guest to release the
// tray (Err empty).
type CDProblem struct {
	Drive string // qemu's id: cd0, cd1...
	Index int    // the drive's index in the config's drives (spec.vm.disks)
	Image string // the medium the config names
	Err   string
}

// Field is the VirtualMachine's field that names the drive's medium.
func (p CDProblem) Field() string { return cdField(p.Index) }

func cdField(index int) string { return fmt.Sprintf("spec.vm.disks[%d].cdrom.image", index) }

// String says what is wrong and what to do, naming the drive by its field.
func (p CDProblem) String() string {
	if p.Err == "" {
		return fmt.Sprintf("CD drive %s (%s): the change to %q waits for the guest to release the tray (unmount or eject the CD in the guest)", p.Drive, p.Field(), p.Image)
	}
	return fmt.Sprintf("CD drive %s (%s) is empty: %q cannot be opened: %s (the VM runs without it; fix the image or change the field to try again)", p.Drive, p.Field(), p.Image, p.Err)
}

// Reporter passes the runner's observations on (in a cluster, to the
// VirtualMachine's status). One that is an EventReporter too gets the VM's
// events.
type Reporter interface {
	// Report is called with the whole status after every change.
	Report(ctx context.Context, s Status)
	// SetStopped sets the VM's desired state to Stopped, so that a guest
	// that shut itself down is not started again (guestShutdownStops).
	SetStopped(ctx context.Context) error
}

type nopReporter struct{}

func (nopReporter) Report(context.Context, Status)   {}
func (nopReporter) SetStopped(context.Context) error { return nil }

func (r *Runner) report(ctx context.Context) {
	r.opts.Reporter.Report(ctx, r.status)
}
