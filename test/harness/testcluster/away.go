package testcluster

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// Pause stops the process and the helpers of its group with SIGSTOP: it
// keeps its memory, files and sockets but does nothing until Resume. The
// kernel still accepts connections on its listening sockets, so clients
// hang as they would on a peer that the network cut off, rather than being
// refused.
func (p *Process) Pause() error { return p.signalGroup(syscall.SIGSTOP) }

// Resume continues a process stopped by Pause.
func (p *Process) Resume() error { return p.signalGroup(syscall.SIGCONT) }

func (p *Process) signalGroup(sig syscall.Signal) error {
	select {
	case <-p.done:
		return fmt.Errorf("%s has exited (%v)", p.Name, p.err)
	default:
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil {
		return fmt.Errorf("%s: %v: %w", p.Name, sig, err)
	}
	return nil
}

// Away takes the API server and etcd away, as a control plane that a node
// no longer reaches: both are stopped with SIGSTOP (see Process.Pause), the
// API server first, so that it sees nothing of etcd's absence. Requests of
// clients hang until their own timeouts; nothing the servers hold is lost.
// Back brings them back. Other parts of the cluster (the controller
// manager, kwok) keep running and find the API server gone too.
func (c *Cluster) Away() error {
	if err := c.APIServer.Pause(); err != nil {
		return err
	}
	if err := c.Etcd.Pause(); err != nil {
		return errors.Join(err, c.APIServer.Resume())
	}
	return nil
}

// Back continues etcd and the API server after Away, etcd first, and waits
// up to timeout until the API server is ready again (/readyz).
func (c *Cluster) Back(ctx context.Context, timeout time.Duration) error {
	if err := errors.Join(c.Etcd.Resume(), c.APIServer.Resume()); err != nil {
		return err
	}
	return WaitUntil(ctx, c.APIServer, timeout, "the API server back", func(ctx context.Context) error {
		return c.client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).Error()
	})
}
