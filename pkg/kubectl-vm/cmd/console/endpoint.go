package console

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
)

// endpoint is where a SPICE client reaches the display.
type endpoint struct {
	host  string
	port  int32
	proxy string // an HTTP CONNECT proxy, from spec.vm.display.spice.proxyUrl
	// stop, when set, ends the port forward that carries the connections
	// to the pod; forwardEnded is closed when it ended, for forwardErr.
	stop         context.CancelFunc
	forwardEnded chan struct{}
	forwardErr   error
}

// forwarded tells whether a port forward carries the connections.
func (ep *endpoint) forwarded() bool { return ep.stop != nil }

// close ends the port forward through its context: ForwardPorts closes
// its listeners itself, and client-go logs a second Close as an error.
func (ep *endpoint) close() {
	if ep.stop != nil {
		ep.stop()
		<-ep.forwardEnded
	}
}

// endpoint finds the way to the display: the LoadBalancer Service's
// address, else the VM's spice server and proxy (VM-Operator's fields),
// else a port forward through the API server.
func (o *Options) endpoint(ctx context.Context, vm *vmclient.VM, pod *corev1.Pod, spice *v1.Spice) (*endpoint, error) {
	c := o.client
	svc, err := c.Kube.CoreV1().Services(vm.Namespace).Get(ctx, vm.Name, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, c.Explain(err)
	}
	if err == nil && svc.Spec.Type == corev1.ServiceTypeLoadBalancer && len(svc.Status.LoadBalancer.Ingress) > 0 {
		ing := svc.Status.LoadBalancer.Ingress[0]
		host := ing.IP
		if host == "" {
			host = ing.Hostname
		}
		for _, p := range svc.Spec.Ports {
			if p.Name == render.PortSpice && host != "" {
				return &endpoint{host: host, port: p.Port}, nil
			}
		}
	}
	if spice.Server != "" || spice.ProxyURL != "" {
		// As VM-Operator: without a server, the proxy is to reach the pod.
		host := spice.Server
		if host == "" {
			host = pod.Status.PodIP
		}
		return &endpoint{host: host, port: *spice.Port, proxy: spice.ProxyURL}, nil
	}
	return o.portForward(ctx, pod, *spice.Port)
}

// portForward listens on a free loopback port and forwards it to the
// pod's port through the API server: over websockets, or SPDY for API
// servers older than 1.30, as kubectl port-forward does.
func (o *Options) portForward(ctx context.Context, pod *corev1.Pod, port int32) (*endpoint, error) {
	u := o.client.Kube.CoreV1().RESTClient().Post().
		Resource("pods").Namespace(pod.Namespace).Name(pod.Name).SubResource("portforward").URL()
	tunnel, err := portforward.NewSPDYOverWebsocketDialer(u, o.restConfig)
	if err != nil {
		return nil, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(o.restConfig)
	if err != nil {
		return nil, err
	}
	dialer := portforward.NewFallbackDialer(tunnel, spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u),
		podexec.UpgradeRefused)
	ready := make(chan struct{})
	fctx, stop := context.WithCancel(ctx)
	fw, err := portforward.NewOnAddressesWithContext(fctx, dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, ready, io.Discard, o.ErrOut)
	if err != nil {
		stop()
		return nil, err
	}
	ep := &endpoint{host: "127.0.0.1", stop: stop, forwardEnded: make(chan struct{})}
	go func() {
		ep.forwardErr = fw.ForwardPorts()
		close(ep.forwardEnded)
	}()
	select {
	case <-ready:
	case <-ep.forwardEnded:
		stop()
		return nil, fmt.Errorf("port forward to pod %s/%s port %d: %w", pod.Namespace, pod.Name, port, o.client.Explain(ep.forwardErr))
	case <-ctx.Done():
		ep.close()
		return nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil {
		ep.close()
		return nil, err
	}
	ep.port = int32(ports[0].Local)
	return ep, nil
}

// holdForward keeps the port forward open for a viewer started by the
// user, until Ctrl-C.
func (o *Options) holdForward(ctx context.Context, ep *endpoint) error {
	fmt.Fprintf(o.ErrOut, "Forwarding %s:%d to the VM's display; press Ctrl-C to end\n", ep.host, ep.port)
	<-ctx.Done()
	return nil
}

// connectionFile is a virt-viewer connection file (see remote-viewer(1),
// CONNECTION FILE), as VM-Operator writes it.
func connectionFile(ep *endpoint, password, title string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "[virt-viewer]\ntype=spice\nhost=%s\nport=%d\npassword=%s\n", ep.host, ep.port, password)
	if ep.proxy != "" {
		fmt.Fprintf(&b, "proxy=%s\n", ep.proxy)
	}
	fmt.Fprintf(&b, "title=%s\ndelete-this-file=1\n", title)
	return b.Bytes()
}
