package testnode

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// startKubeProxy runs kube-proxy in iptables mode (the iptables command's
// backend, nf_tables on Debian 12, as for the kubelet's chains) and waits
// until it serves the kubernetes Service, so that pods reach the API
// through it from their start.
//
// The configuration keeps kube-proxy to the node: NodePorts open on the
// node's address only (not on the machine's own interfaces, nor on
// loopback, which would take the route_localnet sysctl), its servers
// listen on loopback, and it sets no conntrack sysctl (they are the
// machine's, not the test's). The pod subnet is the cluster's, so that
// pods' own Service traffic is not masqueraded. kube-proxy needs no
// conntrack program (it clears entries over netlink); besides its iptables
// and ip6tables chains it leaves nfacct counters in the kernel, which the
// node removes with the chains (host.go).
func (n *Node) startKubeProxy(ctx context.Context) error {
	bin := filepath.Join(n.binDir, "kube-proxy")
	ports, err := freeport.Ports(2)
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection: {kubeconfig: %s}
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
clusterCIDR: %s
detectLocalMode: ClusterCIDR
nodePortAddresses: [%s/32]
iptables: {localhostNodePorts: false, masqueradeAll: %t}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`, n.Kubeconfig, Name, IP, ports[0], ports[1], Subnet, IP, !bridgeCallsIPTables())
	configFile := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	// One of the cluster's processes, so that its log is among theirs.
	if n.KubeProxy, err = n.Cluster.StartProcess("kube-proxy", bin, "--config="+configFile, "--v=2"); err != nil {
		return err
	}
	return testcluster.WaitUntil(ctx, n.KubeProxy, time.Minute, "the kubernetes Service", func(ctx context.Context) error {
		var d net.Dialer
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(kubernetesServiceIP, "443"))
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// bridgeCallsIPTables says whether packets bridged between pods pass
// iptables (br_netfilter's net.bridge.bridge-nf-call-iptables, on here).
// A pod's reply to a client pod on the same bridge is bridged, not routed:
// only then is its source translated back to the ClusterIP the client
// dialled. Without it kube-proxy must masquerade all Service traffic, so
// that replies go to the node, at the cost of the clients' addresses.
func bridgeCallsIPTables() bool {
	b, err := os.ReadFile("/proc/sys/net/bridge/bridge-nf-call-iptables")
	return err == nil && strings.TrimSpace(string(b)) == "1"
}
