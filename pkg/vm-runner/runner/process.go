package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is a child program (qemu, swtpm) in its own process group, so
// that a signal to the runner's terminal does not reach it directly: the
// runner decides how the VM stops.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
	tail *tail         // the end of its output
}

func startProcess(name, path string, args []string, output io.Writer) (*process, error) {
	cmd := exec.Command(path, args...)
	t := &tail{}
	cmd.Stdout, cmd.Stderr = io.MultiWriter(output, t), io.MultiWriter(output, t)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// A runner that dies leaves no VM behind.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), tail: t}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited tells whether the process has ended.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// lastWords is the last line the process wrote, which for qemu is the
// reason it refused to start ("qemu-system-x86_64: -cpu x: unable to find
// CPU model 'x'"); empty when it wrote nothing.
func (p *process) lastWords() string {
	return p.tail.lastLine()
}

// describe says how the process ended.
func (p *process) describe() string {
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return "exited normally"
	case errors.As(p.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by signal %d (%s)", ws.Signal(), ws.Signal())
		}
		return fmt.Sprintf("exited with code %d", ee.ExitCode())
	default:
		return p.err.Error()
	}
}

// kill stops the process hard and waits for it.
func (p *process) kill() {
	if p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// waitFor waits until path exists, the process ends or ctx is done.
func (p *process) waitFor(ctx context.Context, path string) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not create %s: %w", p.name, path, ctx.Err())
		case <-p.done:
			err := fmt.Errorf("%s %s before it created %s", p.name, p.describe(), path)
			if w := p.lastWords(); w != "" {
				err = fmt.Errorf("%w: %s", err, w)
			}
			return err
		case <-t.C:
		}
	}
}

// tail keeps the end of a process's output: enough for its last line.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailSize = 4096

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailSize {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailSize:]...)
	}
	return len(b), nil
}

func (t *tail) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := bytes.TrimSpace(t.buf)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(bytes.TrimSpace(b))
}
