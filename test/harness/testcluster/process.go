package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// Process is a child process of the test whose output goes to a log file.
type Process struct {
	Name string
	// Log is the file that receives stdout and stderr.
	Log string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProcess starts path with args in its own process group, logging to
// dir/<name>.log. The child gets SIGKILL when the test process dies, so a
// crashed or timed-out test leaves nothing behind.
func StartProcess(dir, name, path string, args ...string) (*Process, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's id, which is also its process group's id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the result of the process's exit; it is valid once Done is closed.
func (p *Process) Err() error { return p.err }

// Stop kills the process group and waits for the process to exit.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	// The group, so that helpers the process started die with it.
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Kill()
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
	}
}

// LogTail returns about the last n lines of the process's log.
func (p *Process) LogTail(n int) string {
	b, err := os.ReadFile(p.Log)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tail(string(b), n)
}
