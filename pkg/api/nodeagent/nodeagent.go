// Package nodeagent is the API of vmop's node agent (vm-node), what a VM
// pod and the agent share: the device resource a VM pod requests, the
// user it runs as, and the one exchange between them. The pod's container offers a unix socket
// in an emptyDir volume; the agent, which reaches that directory through
// the kubelet's pod directories, connects, reads the container's request,
// does for it what only root can, inside the pod's own namespaces, and
// answers. So the VM pod needs no privilege and no host path.
package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/vmop/vmop/pkg/podnet"
)

const (
	// Resource is the extended resource of the agent's device plugin. A VM
	// pod requests one: a node without the agent has none, so the pod is
	// not scheduled there, and one that has it gives the pod /dev/kvm
	// (where KVM is usable), /dev/net/tun and /dev/vhost-net.
	Resource = "devices.vmop.io/vm"
	// RunnerUID is the user (and group) that vm-runner, qemu and swtpm run
	// as in a VM pod (qemu's, as KubeVirt's launcher has it).
	RunnerUID = 107
	// Volume is the emptyDir of a VM pod that holds the socket, mounted at
	// Dir in the containers that ask the agent.
	Volume = "vm-node"
	Dir    = "/run/vmop-node"
	// Socket is the socket's name in Volume.
	Socket = "agent.sock"
	// EnvSocket tells a container to ask the agent, at this path, for
	// what it cannot do itself; a container without it is privileged.
	EnvSocket = "VMOP_NODE_AGENT"
)

// Request is what a container asks the agent for. Every request gets the
// container the devices of its pod: ownership of its Block volumes and of
// the agent's devices, so that its non-root user opens them.
type Request struct {
	// PodNetwork, when set, also asks for the guest's side of the pod's
	// network (podnet.Setup) in the pod's network namespace.
	PodNetwork *podnet.Options `json:"podNetwork,omitempty"`
}

// Response is the agent's answer: an error in words, or what it did.
type Response struct {
	Error      string          `json:"error,omitempty"`
	PodNetwork *podnet.Network `json:"podNetwork,omitempty"`
}

// MaxRequest bounds what the agent reads of a request (a few hundred
// bytes as vm-runner asks): a pod must not make the agent of its node,
// which serves all its VM pods, run out of memory.
const MaxRequest = 64 << 10

// MaxPorts bounds the ports of a request's pod network, each one a rule.
const MaxPorts = 1024

// exchangeTimeout bounds one exchange once the agent has connected.
const exchangeTimeout = time.Minute

// Ask offers socket (in the pod's Volume), waits until the agent
// connects or ctx ends, sends req and returns the agent's answer. The
// socket is gone when Ask returns, so the agent answers a container once
// per ask.
func Ask(ctx context.Context, socket string, req Request) (*Response, error) {
	if err := os.Remove(socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	// Made under a temporary name and renamed: the agent never finds a
	// socket that does not yet listen.
	tmp := filepath.Join(filepath.Dir(socket), "."+filepath.Base(socket))
	_ = os.Remove(tmp)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("offering %s to the node agent: %w", socket, err)
	}
	l.SetUnlinkOnClose(false)
	defer l.Close()
	if err := os.Rename(tmp, socket); err != nil {
		_ = os.Remove(tmp)
		return nil, fmt.Errorf("offering %s to the node agent: %w", socket, err)
	}
	defer os.Remove(socket)
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(exchangeTimeout))
	// The agent answers a container it refuses without reading its
	// request: the answer may be there although the request found the
	// socket closed.
	werr := json.NewEncoder(c).Encode(req)
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		if werr != nil {
			return nil, fmt.Errorf("asking the node agent: %w", werr)
		}
		return nil, fmt.Errorf("the node agent's answer: %w", err)
	}
	if resp.Error != "" {
		return &resp, fmt.Errorf("the node agent: %s", resp.Error)
	}
	return &resp, nil
}

// Answer is the agent's side of one exchange on c: it reads the request,
// and writes what handle returns.
func Answer(c net.Conn, handle func(Request) Response) error {
	_ = c.SetDeadline(time.Now().Add(exchangeTimeout))
	var req Request
	dec := json.NewDecoder(&limitedReader{r: c, n: MaxRequest})
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err != nil {
		err = fmt.Errorf("reading the request: %w", err)
	} else {
		err = req.validate()
	}
	if err != nil {
		_ = json.NewEncoder(c).Encode(Response{Error: err.Error()})
		return err
	}
	return json.NewEncoder(c).Encode(handle(req))
}

// validate bounds the counts of a request.
func (r *Request) validate() error {
	if n := r.PodNetwork; n != nil {
		for field, ports := range map[string][]podnet.Port{"ports": n.Ports, "reserved": n.Reserved} {
			if len(ports) > MaxPorts {
				return fmt.Errorf("podNetwork.%s: %d ports, more than %d", field, len(ports), MaxPorts)
			}
		}
	}
	return nil
}

// limitedReader is io.LimitReader with an error that says why it ends.
type limitedReader struct {
	r io.Reader
	n int64
}

var errTooLarge = fmt.Errorf("the request is larger than %d KiB", MaxRequest>>10)

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errTooLarge
	}
	p = p[:min(int64(len(p)), l.n)]
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// Reply is the agent's side of an exchange on c that it answers without
// reading the request: a refusal.
func Reply(c net.Conn, resp Response) error {
	_ = c.SetDeadline(time.Now().Add(exchangeTimeout))
	return json.NewEncoder(c).Encode(resp)
}

// AskTimeout bounds the wait for the agent: a VM pod is scheduled only
// to a node whose agent registered, so it is late only when it failed.
const AskTimeout = 2 * time.Minute

// AskIfServed asks the agent when the container is one it serves
// (EnvSocket is set), and returns nil otherwise (a privileged container
// does all itself).
func AskIfServed(ctx context.Context, req Request) (*Response, error) {
	socket := os.Getenv(EnvSocket)
	if socket == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, AskTimeout, errNoAgent)
	defer cancel()
	resp, err := Ask(ctx, socket, req)
	if err != nil {
		return resp, err
	}
	return resp, os.WriteFile(filepath.Join(filepath.Dir(socket), Prepared), nil, 0o644)
}

// Prepared is the file beside the socket that AskIfServed leaves once the
// agent answered: processes exec'd into the container later (the
// uploader's receiver) wait for it with WaitPrepared.
const Prepared = "prepared"

// WaitPrepared waits until the agent has answered a process of this pod
// (AskIfServed), when the container is one it serves.
func WaitPrepared(ctx context.Context) error {
	socket := os.Getenv(EnvSocket)
	if socket == "" {
		return nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, AskTimeout, errNoAgent)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := os.Stat(filepath.Join(filepath.Dir(socket), Prepared)); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
}

var errNoAgent = fmt.Errorf("vmop's node agent did not answer within %s: check that its pod runs on this node (kubectl -n vmop-system get pods -l app.kubernetes.io/name=vm-node -o wide) and read its log", AskTimeout)
