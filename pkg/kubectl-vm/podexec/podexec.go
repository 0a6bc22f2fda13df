// Package podexec runs vm-runner subcommands in a VM's pod through
// pods/exec: the way kubectl vm reaches what only the runner can reach
// (the serial console, the guest's ports on qemu's user network).
//
// pods/exec rather than pods/portforward or pods/attach: the standard
// "edit" and "admin" roles grant it, it passes API server proxies that
// carry kubectl exec, and the runner subcommand can tell the user what
// went wrong inside the pod (no guest port, another console client)
// instead of a bare closed stream.
package podexec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
)

// Streams are what the command reads and writes. With TTY, the runner
// side gets a terminal and Stderr is merged into Stdout, as in kubectl
// exec -t.
type Streams struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	TTY            bool
	// Resize, when set with TTY, passes on the local terminal's size.
	Resize remotecommand.TerminalSizeQueue
}

// ExitError is a non-zero exit of the command in the pod.
type ExitError struct {
	Code int
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Running finds the VM called name and its pod, which RunningPod must
// find running: what every command that execs into the runner starts with.
func Running(ctx context.Context, c *vmclient.Client, name string) (*vmclient.VM, *corev1.Pod, error) {
	vm, err := c.Get(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	pod, err := RunningPod(ctx, c, vm)
	if err != nil {
		return nil, nil, err
	}
	return vm, pod, nil
}

// RunningPod returns the VM's pod when its runner container runs, else
// an error that says what the pod is doing instead.
func RunningPod(ctx context.Context, c *vmclient.Client, vm *vmclient.VM) (*corev1.Pod, error) {
	pod, err := c.Pod(ctx, vm)
	if err != nil {
		return nil, err
	}
	if pod == nil {
		return nil, fmt.Errorf("vm %s/%s is not running: it has no pod", vm.Namespace, vm.Name)
	}
	if pod.DeletionTimestamp != nil {
		return nil, fmt.Errorf("vm %s/%s is stopping: its pod %s is being deleted", vm.Namespace, vm.Name, pod.Name)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name != render.ContainerRunner {
			continue
		}
		switch {
		case cs.State.Running != nil:
			return pod, nil
		case cs.State.Waiting != nil:
			return nil, fmt.Errorf("vm %s/%s is not running: its runner container is waiting (%s)", vm.Namespace, vm.Name, why(cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			return nil, fmt.Errorf("vm %s/%s is not running: its runner container terminated (%s)", vm.Namespace, vm.Name, why(cs.State.Terminated.Reason, cs.State.Terminated.Message))
		}
	}
	return nil, fmt.Errorf("vm %s/%s is not running: its pod %s is %s", vm.Namespace, vm.Name, pod.Name, pod.Status.Phase)
}

func why(reason, message string) string {
	message = strings.TrimSpace(message)
	if i := strings.IndexByte(message, '\n'); i >= 0 {
		message = message[:i]
	}
	switch {
	case message == "":
		return reason
	case reason == "":
		return message
	}
	return reason + ": " + message
}

// Exec runs command in the runner container of pod until it exits or ctx
// ends. A non-zero exit is an *ExitError.
func Exec(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, command []string, s Streams) error {
	kube, err := rest.RESTClientFor(restConfig(cfg))
	if err != nil {
		return err
	}
	req := kube.Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: render.ContainerRunner,
			Command:   command,
			Stdin:     s.Stdin != nil,
			Stdout:    s.Stdout != nil,
			Stderr:    s.Stderr != nil && !s.TTY,
			TTY:       s.TTY,
		}, scheme.ParameterCodec)
	// WebSockets first, as kubectl does since 1.30; SPDY where a proxy
	// or an older API server refuses the upgrade.
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return err
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	executor, err := remotecommand.NewFallbackExecutor(ws, spdy, UpgradeRefused)
	if err != nil {
		return err
	}
	opts := remotecommand.StreamOptions{Stdin: s.Stdin, Stdout: s.Stdout, Tty: s.TTY, TerminalSizeQueue: s.Resize}
	if !s.TTY {
		opts.Stderr = s.Stderr
	}
	err = executor.StreamWithContext(ctx, opts)
	var code exec.CodeExitError
	if errors.As(err, &code) {
		return &ExitError{Code: code.Code}
	}
	return err
}

// restConfig is cfg set up for the core API group, which the exec
// subresource is part of.
func restConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.APIPath = "/api"
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	return c
}

// UpgradeRefused says whether err is an API server or proxy refusing the
// WebSocket upgrade, after which kubectl falls back to SPDY. client-go
// returns k8s.io/streaming's UpgradeFailureError, which the deprecated
// apimachinery httpstream.IsUpgradeFailure does not recognize.
func UpgradeRefused(err error) bool {
	return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
}
