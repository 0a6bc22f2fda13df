package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/podnet"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/dhcp"
)

// errNotInPod: a pod network rewrites the network namespace the runner
// runs in, which outside a pod is the host's.
var errNotInPod = errors.New("pod network: the runner is not in a Kubernetes pod (no KUBERNETES_SERVICE_HOST), and would change this host's network: a stand-alone runner uses a user or tap network")

// Where the runner finds what tap networks need: the node's bridges
// (host network), and qemu's bridge helper with its access list in the
// runner's image. Variables for tests.
var (
	sysClassNet  = "/sys/class/net"
	bridgeHelper = "/usr/lib/qemu/qemu-bridge-helper"
	bridgeConf   = "/etc/qemu/bridge.conf"
	resolvConf   = "/etc/resolv.conf"
)

// checkTapNetworks tells before qemu starts what a tap network lacks,
// in words, where qemu's bridge helper would only fail with its own.
func checkTapNetworks(vm *runnerconfig.VM) error {
	for i, n := range vm.Network {
		if n.Type != runnerconfig.NetworkTap {
			continue
		}
		for _, f := range []string{bridgeHelper, bridgeConf} {
			if _, err := os.Stat(f); err != nil {
				return fmt.Errorf("network %d (tap): the runner image has no %s, which tap networks need (qemu's bridge helper; in Debian's qemu-system-common)", i, f)
			}
		}
		if _, err := os.Stat(filepath.Join(sysClassNet, n.Bridge, "bridge")); err != nil {
			node, _ := os.Hostname()
			return fmt.Errorf("network %d (tap): bridge %q does not exist on node %s: create it there, or choose another bridge", i, n.Bridge, node)
		}
	}
	return nil
}

// podNetOptions are what the guest's side of the pod network is made
// from; nil without a pod network.
func (r *Runner) podNetOptions() (*podnet.Options, error) {
	n := r.config.VM.PodNetwork()
	if n == nil {
		return nil, nil
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, errNotInPod
	}
	o := &podnet.Options{Ports: podnetPorts(n.Ports), Reserved: podnetPorts(r.config.VM.OwnPorts()), MAC: n.MAC}
	var err error
	if o.Net, err = netip.ParsePrefix(n.Net); err != nil {
		return nil, fmt.Errorf("pod network: net %q: %w", n.Net, err)
	}
	return o, nil
}

// preparePod readies what qemu needs of the pod before anything opens
// it: vmop's node agent gives an unprivileged runner its devices and
// makes the guest's side of the pod network; a privileged runner (which
// the agent does not serve) makes that network itself.
func (r *Runner) preparePod(ctx context.Context) error {
	o, err := r.podNetOptions()
	if err != nil {
		return &ExitError{Code: runnerconfig.ExitNetwork, Err: err}
	}
	asked := time.Now()
	resp, err := nodeagent.AskIfServed(ctx, nodeagent.Request{PodNetwork: o})
	if err != nil {
		return &ExitError{Code: runnerconfig.ExitNodeAgent, Err: err}
	}
	switch {
	case resp != nil:
		r.log.Info("Node agent answered", "took", time.Since(asked).Round(time.Millisecond), "podNetwork", o != nil)
		if o != nil && resp.PodNetwork == nil {
			return &ExitError{Code: runnerconfig.ExitNodeAgent, Err: errors.New("pod network: the node agent made none")}
		}
		r.podNet = resp.PodNetwork
	case o != nil:
		if r.podNet, err = podnet.Setup(*o); err != nil {
			return &ExitError{Code: runnerconfig.ExitNetwork, Err: fmt.Errorf("pod network: %w", err)}
		}
	}
	return nil
}

// servePodNetwork serves the guest its address on the pod network by DHCP
// until ctx ends; nothing without a pod network.
func (r *Runner) servePodNetwork(ctx context.Context) error {
	pn := r.podNet
	if pn == nil {
		return nil
	}
	n := r.config.VM.PodNetwork()
	mac, err := net.ParseMAC(n.MAC)
	if err != nil {
		return fmt.Errorf("pod network: mac %q: %w", n.MAC, err)
	}
	dns, search := podnet.ResolvConf(resolvConf)
	lease := dhcp.Lease{
		MAC: mac, Addr: pn.Guest, Router: pn.Gateway, DNS: dns, Search: search,
		Hostname: r.config.VM.Name, MTU: pn.MTU, Duration: leaseTime,
	}
	srv, err := dhcp.Listen(ctx, podnet.Tap, lease)
	if err != nil {
		return fmt.Errorf("pod network: the guest's DHCP server: %w", err)
	}
	go func() {
		if err := srv.Serve(ctx, r.log); err != nil {
			r.log.Error("The guest's DHCP server stopped: the guest gets no address on the pod network", "err", err)
		}
	}()
	r.podMAC = n.MAC
	r.log.Info("Guest on the pod network", "podIP", pn.PodIP, "guest", pn.Guest, "uplink", pn.Uplink, "mtu", pn.MTU)
	return nil
}

// leaseTime: the lease never changes, so a long one saves the guest's
// renewals nothing but log lines.
const leaseTime = 24 * time.Hour

// podnetPorts are ports as podnet takes them.
func podnetPorts(ports []runnerconfig.Port) []podnet.Port {
	out := make([]podnet.Port, len(ports))
	for i, p := range ports {
		out[i] = podnet.Port{Protocol: p.Protocol, Port: uint16(p.Port)}
	}
	return out
}
