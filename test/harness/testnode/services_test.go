package testnode

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// proxySysctls names the snapshot of the sysctls kube-proxy could change.
const proxySysctls = "kube-proxy sysctls"

// testServices runs a server pod behind a NodePort Service and reaches it
// through kube-proxy: from the node (the test process) at the ClusterIP
// and at the node's IP and NodePort, and from another pod at the
// ClusterIP, a pod on the same bridge as the server.
func testServices(t *testing.T, n *Node, before map[string]string) {
	ctx := t.Context()
	require.NoError(t, n.ImportNetcheck(t.Context()))
	server := netcheckPod("server", "serve", "8080")
	server.Labels = map[string]string{"app": "netcheck"}
	runPod(t, n, server, corev1.PodRunning)
	svc, err := n.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "netcheck"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: server.Labels,
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	created := time.Now()
	clusterIP := net.JoinHostPort(svc.Spec.ClusterIP, "80")
	var answer string
	eventually.Succeeds(t, time.Minute, func() error {
		// A short wait: a connection begun before kube-proxy has the
		// Service goes to the bridge, and stays there until it fails.
		answer, err = ask(clusterIP, 500*time.Millisecond)
		if err != nil {
			return fmt.Errorf("ClusterIP %s: %w", clusterIP, err)
		}
		return nil
	})
	t.Logf("ClusterIP %s answered %v after the Service's create", clusterIP, time.Since(created).Round(time.Millisecond))
	require.Equal(t, "server\n", answer)

	nodePort := net.JoinHostPort(IP, strconv.Itoa(int(svc.Spec.Ports[0].NodePort)))
	answer, err = ask(nodePort, 10*time.Second)
	require.NoError(t, err, "NodePort %s", nodePort)
	require.Equal(t, "server\n", answer)

	// From pods: at the ClusterIP, and by name through the cluster's DNS
	// (the short name in the pod's namespace, and the full one).
	for name, addr := range map[string]string{
		"client": clusterIP, "client-short": "netcheck:80", "client-fqdn": "netcheck.default.svc." + ClusterDomain + ":80",
	} {
		client := runPod(t, n, netcheckPod(name, "dial", addr), corev1.PodSucceeded, corev1.PodFailed)
		logs, err := n.Client.CoreV1().Pods("default").GetLogs(name, &corev1.PodLogOptions{}).DoRaw(ctx)
		require.NoError(t, err)
		require.Equal(t, corev1.PodSucceeded, client.Status.Phase, "%s pod's log: %s", name, logs)
		require.Equal(t, "server\n", string(logs), "%s dialled %s", name, addr)
	}
	// The cluster's DNS forwards nothing: a name of the world is unknown.
	outside := runPod(t, n, netcheckPod("client-outside", "dial", "deb.debian.org:80"), corev1.PodSucceeded, corev1.PodFailed)
	logs, err := n.Client.CoreV1().Pods("default").GetLogs(outside.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	require.NoError(t, err)
	require.Equal(t, corev1.PodFailed, outside.Status.Phase, "client-outside's log: %s", logs)
	require.Contains(t, string(logs), "no such host")

	require.Equal(t, before[proxySysctls], hostSnapshot(t)[proxySysctls], "sysctls while kube-proxy runs")
}

// testServiceRangeStays checks what keeps Service traffic on the machine
// where kube-proxy would not: an address of the range that no Service
// holds goes to the bridge, where nothing answers, and the rules that drop
// traffic leaving the pod subnet are in place (asserted before anything is
// sent). A Service without endpoints is refused by kube-proxy, and what
// the node sends to one whose endpoint is outside the subnet (written by
// hand, as the endpoint controller never would) is dropped before it
// leaves: a UDP Service, as a dropped datagram fails its send (EPERM)
// where TCP would just retry.
func testServiceRangeStays(t *testing.T, n *Node) {
	ctx := t.Context()
	free := freeServiceIP(t, n)
	out, err := exec.Command("ip", "route", "get", free).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "dev "+Bridge, "the route to an address of %s", testcluster.ServiceCIDR)
	for _, rule := range [][]string{
		{"mangle", "FORWARD", "-s", Subnet, "!", "-d", Subnet, "-j", "DROP"},
		{"filter", "OUTPUT", "-m", "conntrack", "--ctstate", "DNAT", "--ctorigdst", testcluster.ServiceCIDR, "!", "-d", Subnet, "-j", "DROP"},
		{"filter", "OUTPUT", "-m", "conntrack", "--ctstate", "DNAT", "--ctorigdst", IP, "!", "-d", Subnet, "-j", "DROP"},
	} {
		args := append([]string{"-t", rule[0], "-C"}, append(rule[1:], "-m", "comment", "--comment", ruleComment)...)
		out, err := exec.Command("iptables", args...).CombinedOutput()
		require.NoError(t, err, "iptables %v: %s", args, out)
	}
	_, err = ask(net.JoinHostPort(free, "80"), 10*time.Second)
	require.ErrorIs(t, err, syscall.EHOSTUNREACH, "an address no Service holds")

	services := n.Client.CoreV1().Services("default")
	empty, err := services.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "empty"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	awaitError(t, "Service empty", func() error {
		_, err := ask(net.JoinHostPort(empty.Spec.ClusterIP, "80"), 10*time.Second)
		return err
	}, syscall.ECONNREFUSED)

	outside, err := services.Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "outside"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolUDP}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = n.Client.DiscoveryV1().EndpointSlices("default").Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "outside", Labels: map[string]string{discoveryv1.LabelServiceName: "outside"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{outsideAddress(t)}}},
		Ports:       []discoveryv1.EndpointPort{{Port: ptr.To[int32](80), Protocol: ptr.To(corev1.ProtocolUDP)}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	// Until kube-proxy has the Service, the datagram goes to the bridge
	// and the send succeeds; without the node's rule, it would reach the
	// machine's port and the next send fail with ECONNREFUSED.
	awaitError(t, "Service outside", func() error {
		c, err := net.Dial("udp", net.JoinHostPort(outside.Spec.ClusterIP, "80"))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	}, syscall.EPERM)
}

// freeServiceIP returns an address of the Service range that no Service
// holds, from the range's lower band: the API server gives new Services
// addresses of the upper band while it has room, so none created later
// takes it either. (A fixed address of the upper band once met the earlier
// test's Service there.)
func freeServiceIP(t *testing.T, n *Node) string {
	list, err := n.Client.CoreV1().Services("").List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	held := map[string]bool{}
	for _, s := range list.Items {
		held[s.Spec.ClusterIP] = true
	}
	prefix := netip.MustParsePrefix(testcluster.ServiceCIDR)
	a := prefix.Addr().Next().Next() // .1 is the kubernetes Service's
	for ; prefix.Contains(a); a = a.Next() {
		if !held[a.String()] {
			return a.String()
		}
	}
	t.Fatalf("every address of %s is held by a Service", prefix)
	return ""
}

// awaitError calls try until it fails with want, for up to a minute: until
// kube-proxy has a new Service, its packets go to the bridge instead.
func awaitError(t *testing.T, what string, try func() error, want syscall.Errno) {
	t.Helper()
	eventually.Succeeds(t, time.Minute, func() error {
		if err := try(); !errors.Is(err, want) {
			return fmt.Errorf("%s: want %v, got %v", what, want, err)
		}
		return nil
	})
}

// outsideAddress is an address of the machine's own outside the node's
// subnet: were the node's rules to let the Service's packets through, they
// would still not leave the machine.
func outsideAddress(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	_, subnet, err := net.ParseCIDR(Subnet)
	require.NoError(t, err)
	for _, a := range addrs {
		ip := a.(*net.IPNet).IP.To4()
		if ip != nil && ip.IsGlobalUnicast() && !subnet.Contains(ip) {
			return ip.String()
		}
	}
	// A fact of this machine's network, not a missing install.
	t.Skip("the machine has no IPv4 address outside the node's subnet (its network, not an install)")
	return ""
}

// ask connects to addr and returns what the server says before it closes,
// all within timeout.
func ask(addr string, timeout time.Duration) (string, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// netcheckPod is a pod that runs netcheck with args, once.
func netcheckPod(name string, args ...string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name: "netcheck", Image: NetcheckImage, ImagePullPolicy: corev1.PullNever, Args: args,
			}},
		},
	}
}

// runPod creates pod in the default namespace and waits until it is in one
// of phases.
func runPod(t *testing.T, n *Node, pod *corev1.Pod, phases ...corev1.PodPhase) *corev1.Pod {
	ctx := t.Context()
	pods := n.Client.CoreV1().Pods("default")
	_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
	eventually.Succeeds(t, 2*time.Minute, func() error {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pod = p
		if !slices.Contains(phases, p.Status.Phase) {
			return fmt.Errorf("pod %s: %+v", pod.Name, pod.Status)
		}
		return nil
	})
	return pod
}
