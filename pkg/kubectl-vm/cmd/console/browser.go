package console

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/kubectl-vm/webconsole"
	"github.com/vmop/vmop/pkg/render"
	spicehtml5 "github.com/vmop/vmop/third_party/spice-html5"
)

// stopWait bounds how long the command watches the pod, after the display
// closed a connection, for a sign that the VM stopped.
const stopWait = 10 * time.Second

// runBrowser serves the display to a web browser until the page is closed
// or Ctrl-C.
func (o *Options) runBrowser(ctx context.Context, vm *vmclient.VM, ep *endpoint, password string) error {
	addr := net.JoinHostPort(ep.host, strconv.Itoa(int(ep.port)))
	srv, err := webconsole.New(webconsole.Config{
		Session: webconsole.Session{
			Namespace: vm.Namespace, VM: vm.Name, Password: password,
			Expiry:  int64(o.Expiry.Seconds()),
			Pending: vm.Mode == vmclient.ModeGitOps,
			Command: fmt.Sprintf("%s console --browser -n %s %s", o.cmdName, vm.Namespace, vm.Name),
			Client:  "spice-html5 " + spicehtml5.Version,
		},
		Dial: func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		},
		Why: func(ctx context.Context) *webconsole.Notice { return o.whyEnded(ctx, vm, ep) },
		Log: o.ErrOut,
	})
	if err != nil {
		return err
	}
	url, err := srv.Listen(ctx)
	if err != nil {
		return err
	}
	if o.NoLaunch {
		fmt.Fprintln(o.Out, url)
		fmt.Fprintf(o.ErrOut, "Open the URL above in a browser within %s (the password's life): it opens the page once, in one browser; closing the page or Ctrl-C ends\n", o.Expiry)
	} else {
		if err := webconsole.OpenBrowser(url, o.ErrOut); err != nil {
			return fmt.Errorf("cannot open a browser (%v): open the page yourself with --no-launch", err)
		}
		fmt.Fprintf(o.ErrOut, "Opened the display of vm %s/%s in your browser; closing the page or Ctrl-C ends\n", vm.Namespace, vm.Name)
	}
	select {
	case <-ctx.Done():
	case <-srv.Closed():
		fmt.Fprintln(o.ErrOut, "The page was closed")
	}
	return nil
}

// whyEnded tells the page why the display's side ended a connection or
// could not be reached: the VM's pod is going or gone (watched for a
// moment: qemu exits before the pod does), or the port forward through the
// API server ended. Else nil: the display closed it itself, as after a
// refused password (webconsole words an unreachable display itself).
func (o *Options) whyEnded(ctx context.Context, vm *vmclient.VM, ep *endpoint) *webconsole.Notice {
	deadline := time.Now().Add(stopWait)
	for {
		pod, perr := o.client.Pod(ctx, vm)
		if perr == nil && !runnerRunning(pod) {
			return &webconsole.Notice{Kind: "stopped", Message: fmt.Sprintf(
				"The VM %s/%s stopped. Start it with: %s start -n %s %s", vm.Namespace, vm.Name, o.cmdName, vm.Namespace, vm.Name)}
		}
		select {
		case <-ep.forwardEnded:
			return &webconsole.Notice{Kind: "dropped", Message: fmt.Sprintf(
				"The connection to the VM's pod through the API server dropped (%v).", o.client.Explain(ep.forwardErr))}
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil
		}
		time.Sleep(time.Second)
	}
}

// podRunning tells whether pod runs and is not being deleted.
func podRunning(pod *corev1.Pod) bool {
	return pod != nil && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning
}

// runnerRunning tells whether pod runs, and is not being deleted, with its
// runner container running.
func runnerRunning(pod *corev1.Pod) bool {
	if !podRunning(pod) {
		return false
	}
	for _, s := range pod.Status.ContainerStatuses {
		if s.Name == render.ContainerRunner {
			return s.State.Running != nil
		}
	}
	return false
}
