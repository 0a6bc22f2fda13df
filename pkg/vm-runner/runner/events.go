package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
)

// Event is a moment of the VM's life that its users should see; in a
// cluster, vm-runner writes it as a Kubernetes Event regarding the VM. The
// status says how the VM is, events say what happened to it and when.
type Event struct {
	// Warning marks what went wrong; other events are normal.
	Warning bool
	// Reason is one of the Reason constants.
	Reason string
	// Action is what the runner did or saw, as a verb.
	Action string
	// Message says it to a person. It never holds a secret.
	Message string
}

// EventReporter is a Reporter that also takes the VM's events. The runner
// calls Event from the loop that drives the VM: it must return at once.
type EventReporter interface {
	Event(ctx context.Context, e Event)
}

// The reasons of the runner's events: one per kind of moment, never one
// per status change.
const (
	// ReasonQemuStarted: qemu runs the guest; the message names the
	// accelerator (tcg: emulated, slow).
	ReasonQemuStarted = "QemuStarted"
	// ReasonStartFailed (Warning): the VM did not start; the message has
	// the reason, for a qemu that refused with qemu's last words.
	ReasonStartFailed = "StartFailed"
	// ReasonBooted: the guest agent answers, so the guest's OS is up; the
	// message names the OS when the agent tells it.
	ReasonBooted = "Booted"
	// ReasonBootOverdue (warning): the guest agent has not connected
	// within bootWait of the guest's start; the guest is left running.
	ReasonBootOverdue = "BootOverdue"
	// ReasonCPUsChanged: a live change plugged or unplugged CPUs; an
	// unplug counts once the guest has let the CPU go.
	ReasonCPUsChanged = "CPUsChanged"
	// ReasonCPUsDeferred (warning): qemu under TCG can plug no more CPUs
	// in this run; the change applies at the next start.
	ReasonCPUsDeferred = "CPUsDeferred"
	// ReasonRAMChanged: the guest's balloon reached the RAM of a live
	// change.
	ReasonRAMChanged = "RAMChanged"
	// ReasonMediumChanged: a live change inserted or ejected a CD.
	ReasonMediumChanged = "MediumChanged"
	// ReasonMediumUnavailable (Warning): a CD image cannot be opened; its
	// drive stays empty and the VM runs without it.
	ReasonMediumUnavailable = "MediumUnavailable"
	// ReasonWaitingForTray: a CD change waits until the guest releases
	// the drive (a mounted CD locks its tray).
	ReasonWaitingForTray = "WaitingForTray"
	// ReasonDisplayPasswordChanged: the display password or its expiry
	// changed (a console was opened, the display Secret changed).
	ReasonDisplayPasswordChanged = "DisplayPasswordChanged"
	// ReasonShutdownRequested: the runner asked the guest to shut down,
	// through its agent or with the ACPI power button.
	ReasonShutdownRequested = "ShutdownRequested"
	// ReasonShutdownCompleted: the guest shut down as asked.
	ReasonShutdownCompleted = "ShutdownCompleted"
	// ReasonShutdownForced (Warning): the guest did not shut down within
	// powerdownTimeout; qemu is stopped hard.
	ReasonShutdownForced = "ShutdownForced"
	// ReasonGuestShutdown: the guest shut itself down; the message says
	// whether the VM stays stopped (guestShutdownStops).
	ReasonGuestShutdown = "GuestShutdown"
	// ReasonQemuExited (Warning): qemu ended without a guest shutdown;
	// the message has how and qemu's last words.
	ReasonQemuExited = "QemuExited"
	// ReasonQemuHung (warning): qemu stopped answering its monitor; the
	// runner killed it, and the VM starts again.
	ReasonQemuHung = "QemuHung"
	// ReasonDiskFull (warning): a disk's volume is full; qemu paused the
	// guest rather than fail its writes.
	ReasonDiskFull = v1.ReasonDiskFull
	// ReasonDiskError (warning): a disk's read or write failed otherwise;
	// qemu paused the guest.
	ReasonDiskError = v1.ReasonDiskError
	// ReasonDiskResumed: the guest paused on a disk's error goes on.
	ReasonDiskResumed = "DiskResumed"
	// ReasonDataVolumeFull (warning): the VM's data volume has too little
	// room for the TPM to save its state; the VM starts all the same.
	ReasonDataVolumeFull = "DataVolumeFull"
	// ReasonFrozen: the guest's file systems were frozen for a snapshot
	// (vm-runner freeze); ReasonThawed: thawed as asked (vm-runner thaw,
	// or at the VM's stop); ReasonFreezeExpired (warning): thawed by the
	// runner when the freeze's timeout ran out.
	ReasonFrozen        = "Frozen"
	ReasonThawed        = "Thawed"
	ReasonFreezeExpired = "FreezeExpired"
	// ReasonGuestPanicked (warning): the guest's kernel panicked; qemu
	// holds it paused, not restarted.
	ReasonGuestPanicked = v1.ReasonGuestPanicked
)

// The actions of the runner's events.
const (
	actionStart        = "Start"
	actionBoot         = "Boot"
	actionSetCPUs      = "SetCPUs"
	actionSetRAM       = "SetRAM"
	actionChangeMedium = "ChangeMedium"
	actionSetPassword  = "SetPassword"
	actionShutdown     = "Shutdown"
	actionStop         = "Stop"
	actionExit         = "Exit"
	actionPause        = "Pause"
	actionResume       = "Resume"
	actionFreeze       = "Freeze"
	actionThaw         = "Thaw"
)

// event passes e on when the Reporter takes events.
func (r *Runner) event(ctx context.Context, e Event) {
	if er, ok := r.opts.Reporter.(EventReporter); ok {
		er.Event(ctx, e)
	}
}

// startFailed tells of err, the ExitError of a failed start, and returns
// it.
func (r *Runner) startFailed(ctx context.Context, err error) error {
	r.event(ctx, Event{Warning: true, Reason: ReasonStartFailed, Action: actionStart, Message: "The VM did not start: " + err.Error()})
	return err
}

// startedMessage names the accelerator, and why the guest is emulated
// when the config did not ask for it.
func startedMessage(accel, configured string) string {
	msg := "qemu runs the guest with the " + accel + " accelerator"
	if accel == "tcg" && configured != "tcg" && configured != "none" {
		msg += " (emulated: the node has no usable /dev/kvm)"
	}
	return msg
}

// bootedMessage names the guest's OS when the agent told it.
func bootedMessage(info guestagent.Info, told bool) string {
	name := info.OS.PrettyName
	if name == "" {
		name = strings.TrimSpace(info.OS.Name + " " + info.OS.Version)
	}
	if !told || name == "" {
		return "The guest agent answers (it does not tell the guest's OS)"
	}
	if k := info.OS.KernelRelease; k != "" {
		name += ", kernel " + k
	}
	return "The guest agent answers: " + name
}

// mib writes a RAM size for people.
func mib(bytes int64) string {
	if bytes%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", bytes>>30)
	}
	return fmt.Sprintf("%d MiB", bytes>>20)
}

// seconds writes a duration for people, to a tenth of a second.
func seconds(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
