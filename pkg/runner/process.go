package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
}

func startProcess(name, path string, args []string, output io.Writer) (*process, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = output, output
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// A runner that dies leaves no VM behind.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
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

// describe says how the process ended.
func (p *process) describe() string {
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return "exited normally"
	case errors.As(p.err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "killed by " + ws.Signal().String()
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
			return fmt.Errorf("%s %s before it created %s", p.name, p.describe(), path)
		case <-t.C:
		}
	}
}
