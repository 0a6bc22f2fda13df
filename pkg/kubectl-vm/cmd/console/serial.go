package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"os/user"
	"sync"
	"syscall"

	"golang.org/x/term"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/runnerexec"
)

// runSerial attaches the local terminal to the VM's serial console: vm-runner
// serial --attach in the VM's pod, through pods/exec.
func (o *Options) runSerial(ctx context.Context) error {
	vm, pod, err := podexec.Running(ctx, o.client, o.Name)
	if err != nil {
		return err
	}
	streams := podexec.Streams{}
	eol := "\n"
	if f, ok := o.In.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("raw terminal: %w", err)
		}
		defer func() {
			_ = term.Restore(fd, old)
			fmt.Fprintln(o.ErrOut) // the shell's prompt on a line of its own
		}()
		streams.TTY, eol = true, "\r\n"
		sizeCtx, stop := context.WithCancel(ctx)
		defer stop()
		// The size of the terminal in the pod follows the local one's.
		// (The guest learns it only from stty or resize: a serial line
		// carries no size.)
		streams.Resize = watchSize(sizeCtx, func() (int, int, error) { return term.GetSize(fd) })
	}
	// Ctrl-] and the end of the input both leave: vm-runner leaves at the
	// escape, so the session ends with its exit, in the pod too.
	streams.Stdin = io.MultiReader(runnerexec.UntilEscape(o.In), bytes.NewReader([]byte{runnerexec.Escape}))
	out := &attachWatch{out: o.Out, announce: func() {
		fmt.Fprintf(o.ErrOut, "Connected to the serial console of vm %s/%s; Ctrl-] to leave%s", vm.Namespace, vm.Name, eol)
	}}
	streams.Stdout, streams.Stderr = out, out
	err = podexec.Exec(ctx, o.client.Config, pod, runnerexec.Command(runnerexec.ModeAttach, who()), streams)
	if before, attached := out.result(); !attached {
		if before != "" {
			return fmt.Errorf("vm %s/%s: %w", vm.Namespace, vm.Name, runnerexec.CommandError(before))
		}
		if err == nil {
			err = errors.New("the runner ended the session before it began")
		}
		return fmt.Errorf("vm %s/%s: serial console: %w", vm.Namespace, vm.Name, err)
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("vm %s/%s: serial console: %w", vm.Namespace, vm.Name, err)
	}
	return nil
}

// who names this client to one refused meanwhile: user@host.
func who() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// attachWatch passes vm-runner's output on once its first line has said
// that it attached (runnerexec.AttachedBanner), announcing that
// instead; until then it keeps the output: the reason it did not attach.
type attachWatch struct {
	out      io.Writer
	announce func()

	mu       sync.Mutex
	attached bool
	before   []byte
}

// maxBefore bounds what is kept before the banner: an error message.
const maxBefore = 16 << 10

func (w *attachWatch) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.attached {
		return w.out.Write(b)
	}
	if len(w.before) < maxBefore {
		w.before = append(w.before, b[:min(len(b), maxBefore-len(w.before))]...)
	}
	line, rest, ok := bytes.Cut(w.before, []byte("\n"))
	if !ok || !bytes.HasPrefix(line, []byte(runnerexec.AttachedBanner)) {
		return len(b), nil
	}
	w.attached = true
	w.announce()
	w.before = nil
	if len(rest) > 0 {
		if _, err := w.out.Write(rest); err != nil {
			return 0, err
		}
	}
	return len(b), nil
}

// result tells whether the session began and, if not, what came instead.
func (w *attachWatch) result() (before string, attached bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.before), w.attached
}

// sizeQueue hands the terminal's size to the exec stream: at the start
// and on each SIGWINCH, the latest size only.
type sizeQueue struct {
	sizes chan remotecommand.TerminalSize
}

func (q *sizeQueue) Next() *remotecommand.TerminalSize {
	s, ok := <-q.sizes
	if !ok {
		return nil
	}
	return &s
}

// watchSize reports getSize now and whenever the terminal is resized,
// until ctx ends.
func watchSize(ctx context.Context, getSize func() (width, height int, err error)) *sizeQueue {
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	return newSizeQueue(ctx, getSize, winch, func() { signal.Stop(winch) })
}

func newSizeQueue(ctx context.Context, getSize func() (int, int, error), resized <-chan os.Signal, stop func()) *sizeQueue {
	q := &sizeQueue{sizes: make(chan remotecommand.TerminalSize, 1)}
	send := func() {
		w, h, err := getSize()
		if err != nil {
			return
		}
		s := remotecommand.TerminalSize{Width: uint16(w), Height: uint16(h)}
		// A size not yet taken is out of date: replace it.
		select {
		case <-q.sizes:
		default:
		}
		q.sizes <- s
	}
	send()
	go func() {
		defer close(q.sizes)
		defer stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-resized:
				send()
			}
		}
	}()
	return q
}
