package node

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/vm-runner/dhcp"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// networkVM is the test guest, running, with one NIC of the given kind
// (a YAML flow mapping such as "pod: {}"), on which it serves its echo
// port (testguest.EchoPort).
func networkVM(vm, ns, network string) string {
	m := fmt.Sprintf(guestVM, vm, ns)
	m = strings.Replace(m, "state: Stopped", "state: Running", 1)
	m = strings.Replace(m, "    - cdrom:\n        image: \"\"\n", "", 1)
	return strings.Replace(m, "    disks:\n", "    networks:\n    - "+network+"\n    disks:\n", 1)
}

// startDHCPGuest runs the test guest with one NIC of the given kind, in
// GitOps mode in a new namespace ns, until its echo service listens, and
// returns the lease it took by DHCP.
func startDHCPGuest(t *testing.T, ns, vm, network string) string {
	t.Helper()
	manifest := networkVM(vm, ns, network)
	if strings.HasPrefix(network, "tap:") {
		// On the node's network SPICE would listen on the machine's
		// addresses: the test's servers listen on its own bridges only.
		manifest = strings.Replace(manifest, "    display:\n      spice:\n        port: 5910\n", "    display: {outputs: 1}\n", 1)
		require.Contains(t, manifest, "display: {outputs: 1}")
	}
	if strings.HasPrefix(network, "tap:") {
		// A tap NIC joins a bridge of the node: its pod is privileged.
		createNamespaceAt(t, ns, "privileged")
	} else {
		createNamespace(t, ns)
	}
	grantRunner(t, ns)
	addGuestDisk(t, ns, vm, testguest.DHCP)
	file := filepath.Join(t.TempDir(), "vm.yaml")
	require.NoError(t, os.WriteFile(file, []byte(manifest), 0o644))
	rendered := kubectl(t, "", "vm", "render", "--service-account", install.RunnerServiceAccount, "-f", file)
	kubectl(t, rendered, "apply", "-f", "-")
	t.Cleanup(func() {
		_, _, _ = kubectlResult(context.Background(), rendered, "delete", "-f", "-", "--wait", "--timeout", "3m")
	})
	lease := waitConsole(t, ns, vm, testguest.DHCPLine, 4*time.Minute)
	waitConsole(t, ns, vm, testguest.EchoLine, time.Minute)
	return lease
}

// echo sends a line to the guest's echo service at addr and wants it back.
func echo(t *testing.T, addr, line string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 20*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(30*time.Second)))
	_, err = io.WriteString(c, line)
	require.NoError(t, err)
	got := make([]byte, len(line))
	_, err = io.ReadFull(c, got)
	require.NoError(t, err, "echo from %s", addr)
	require.Equal(t, line, string(got))
}

// TestNetworkPod: the test guest on its pod's network (GitOps mode, no
// operator) takes its address from the runner's DHCP server and is
// reached at the pod's IP like any pod: from the node, through a Service
// that kubectl vm expose makes (kube-proxy on the node), from another pod
// (at the pod's IP and the Service's), and through kubectl vm
// port-forward; the pod keeps its SPICE port; what the guest sends as
// another pod or MAC, or over IPv6, does not leave the pod.
func TestNetworkPod(t *testing.T) {
	const ns, vm = "podnet", "web"
	// The lease: the guest's address, the pod's side as its router, the
	// pod's MTU (the node's bridge: 1500) and the VM's name.
	lease := startDHCPGuest(t, ns, vm, "pod: {}")
	require.Equal(t, testguest.DHCPLine+"10.0.2.15/24 router 10.0.2.2 mtu 1500 hostname "+vm, lease)
	pod, err := node.Client.CoreV1().Pods(ns).Get(t.Context(), vm+"-0", metav1.GetOptions{})
	require.NoError(t, err)
	podIP := pod.Status.PodIP
	require.NotEmpty(t, podIP)
	require.False(t, pod.Spec.HostNetwork)

	t.Run("from the node at the pod's IP", func(t *testing.T) {
		start := time.Now()
		// Once seen here: "no route to host", the node's first ARP for
		// the new pod unanswered.
		eventually.Succeeds(t, 30*time.Second, func() error {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(podIP, "7"), 5*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		echo(t, net.JoinHostPort(podIP, "7"), "hello at the pod's IP\n")
		t.Logf("first echo at %s:7 after %v", podIP, time.Since(start).Round(time.Millisecond))
		// Nothing listens on the guest's port 8: the guest refuses, not
		// the pod, which would have no reason to answer at all.
		_, err := net.DialTimeout("tcp", net.JoinHostPort(podIP, "8"), 20*time.Second)
		require.ErrorContains(t, err, "connection refused")
	})

	t.Run("the pod keeps its SPICE port", func(t *testing.T) {
		// The guest has nothing on 5910: a connection there is the pod's
		// SPICE server, which waits for the client's first words.
		c, err := net.DialTimeout("tcp", net.JoinHostPort(podIP, "5910"), 20*time.Second)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write([]byte("REDQ")) // SPICE's link magic, then garbage
		require.NoError(t, err)
	})

	var clusterIP string
	t.Run("through a Service", func(t *testing.T) {
		out := kubectl(t, "", "vm", "expose", "-n", ns, vm, "--port", "7007:7")
		t.Log(out)
		svc, err := node.Client.CoreV1().Services(ns).Get(t.Context(), vm+"-7007", metav1.GetOptions{})
		require.NoError(t, err)
		clusterIP = svc.Spec.ClusterIP
		eventually.Within(t, time.Minute, func() string {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(svc.Spec.ClusterIP, "7007"), 5*time.Second)
			if err != nil {
				return fmt.Sprintf("Service %s at %s:7007: %v", svc.Name, svc.Spec.ClusterIP, err)
			}
			c.Close()
			return ""
		})
		echo(t, net.JoinHostPort(svc.Spec.ClusterIP, "7007"), "hello through the Service\n")
	})

	t.Run("from another pod", func(t *testing.T) {
		require.NoError(t, node.ImportNetcheck(t.Context()))
		targets := map[string]string{"client": net.JoinHostPort(podIP, "7")}
		if clusterIP != "" {
			targets["client-svc"] = net.JoinHostPort(clusterIP, "7007")
		}
		for name, addr := range targets {
			out := runClient(t, ns, name, "dial", addr, "hello from "+name)
			require.Equal(t, "hello from "+name+"\n", out, "what %s got back from %s", name, addr)
		}
	})

	t.Run("through kubectl vm port-forward", func(t *testing.T) {
		out, errOut, err := kubectlResult(t.Context(), "hello through the runner\n", "vm", "port-forward", "--stdio", "7", "-n", ns, vm)
		require.NoError(t, err, "stderr: %s", errOut)
		require.Equal(t, "hello through the runner\n", out)
	})

	t.Run("status and list", func(t *testing.T) {
		out := kubectl(t, "", "vm", "status", "-n", ns, vm)
		require.Contains(t, out, "pod (all ports but 5910/TCP (SPICE) of "+podIP+" reach the guest)")
		out = kubectl(t, "", "vm", "list", "-n", ns, "-o", "wide")
		require.Regexp(t, regexp.MustCompile(`(?m)^`+vm+`\s.*\s`+regexp.QuoteMeta(podIP)+`\s*$`), out)
	})

	t.Run("a guest that poses as another sends nothing out", func(t *testing.T) { spoofing(t, ns, vm, podIP) })
}

// TestNetworkBridge: the test guest on a bridge of the node (a tap
// network, VM-Operator's mode, the pod on the host's network) takes its
// address from a DHCP server on that bridge and answers the node there.
// The bridge is the test's own, and nothing crosses it to elsewhere.
func TestNetworkBridge(t *testing.T) {
	const ns, vm, bridge = "bridged", "lan", "vmoptbr0"
	mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x97, 0x00, 0x0f}
	_ = exec.Command("ip", "link", "del", bridge).Run() // a killed run's
	host(t, "ip", "link", "add", bridge, "type", "bridge")
	t.Cleanup(func() { host(t, "ip", "link", "del", bridge) })
	host(t, "ip", "addr", "add", "10.97.0.1/24", "dev", bridge)
	host(t, "ip", "link", "set", bridge, "up")
	drop := []string{"FORWARD", "-i", bridge, "-j", "DROP"}
	host(t, append([]string{"iptables", "-I"}, drop...)...)
	t.Cleanup(func() { host(t, append([]string{"iptables", "-D"}, drop...)...) })
	srv, err := dhcp.Listen(t.Context(), bridge, dhcp.Lease{
		MAC: mac, Addr: netip.MustParsePrefix("10.97.0.15/24"), Router: netip.MustParseAddr("10.97.0.1"),
		Hostname: vm, MTU: 1500, Duration: time.Hour,
	})
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(t.Context(), slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() { require.NoError(t, <-served) })

	lease := startDHCPGuest(t, ns, vm, fmt.Sprintf("tap: {bridge: %s, mac: %q}", bridge, mac))
	require.Equal(t, testguest.DHCPLine+"10.97.0.15/24 router 10.97.0.1 mtu 1500 hostname "+vm, lease)
	echo(t, "10.97.0.15:7", "hello on the node's bridge\n")
	require.Contains(t, kubectl(t, "", "vm", "status", "-n", ns, vm), "tap on the node's bridge "+bridge)
}

// runClient runs netcheck with args in a pod of namespace ns until it
// ends, and returns its output; it fails t unless the pod succeeded.
func runClient(t *testing.T, ns, name string, args ...string) string {
	t.Helper()
	pods := node.Client.CoreV1().Pods(ns)
	// The namespace enforces Pod Security restricted.
	pod := restrictedPod(ns, name, testnode.NetcheckImage)
	pod.Spec.RestartPolicy = corev1.RestartPolicyNever
	pod.Spec.Containers[0].Name, pod.Spec.Containers[0].Args = "netcheck", args
	_, err := pods.Create(t.Context(), pod, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pods.Delete(context.Background(), name, metav1.DeleteOptions{}) })
	var phase corev1.PodPhase
	eventually.Within(t, 2*time.Minute, func() string {
		p, err := pods.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		if phase = p.Status.Phase; phase == corev1.PodSucceeded || phase == corev1.PodFailed {
			return ""
		}
		return fmt.Sprintf("pod %s is %s", name, phase)
	})
	out := kubectl(t, "", "logs", "-n", ns, name)
	require.Equal(t, corev1.PodSucceeded, phase, "netcheck %s: %s", strings.Join(args, " "), out)
	return out
}

// host runs a command that changes the node's host, as root.
func host(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(args, " "), out)
}
