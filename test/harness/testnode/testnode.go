// Package testnode runs a real single-node Kubernetes cluster for tests:
// the control plane of test/harness/testcluster with kube-scheduler and the
// controllers a node needs, a kubelet whose pods containerd runs with
// runc, on a bridge of Debian's CNI plugins, and kube-proxy, so that
// Services work: a ClusterIP from pods and from the test process, a
// NodePort at the node's IP. vmop's images are imported from archives (no
// registry is reachable), the pod sandbox is a pause image built here, and
// storage is local PersistentVolumes: Block ones on loop devices and
// directories for file systems.
//
// No Service traffic leaves the machine: the Service range is routed into
// the node's bridge, and iptables rules drop what the node's pods send
// elsewhere, and what the node sends to a Service's endpoint elsewhere.
//
// The node changes the host (a bridge, a route, iptables rules, loop
// devices, mounts, the kubelet's sysctls, its and kube-proxy's chains);
// Stop undoes all of it, and Start first removes what a killed run left.
// One node runs at a time on a machine: the kubelet uses fixed host paths.
package testnode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/testcontainerd"
)

// The node's name and network. The addresses are private and the bridge is
// the test's own: nothing of the machine's network is used.
const (
	Name   = "vmop-node"
	Bridge = "vmopnode0"
	Subnet = "10.99.0.0/24"
	// IP is the node's address, on the bridge: the kubelet's, the API
	// server's (the kubernetes Service's endpoint) and the NodePorts'.
	IP = "10.99.0.1"
	// subnetPrefix starts every address of Subnet.
	subnetPrefix = "10.99.0."
	// kubernetesServiceIP is the first address of testcluster.ServiceCIDR,
	// the kubernetes Service's.
	kubernetesServiceIP = "10.0.0.1"
	// ruleComment marks the iptables rules of the node, so that a later
	// run finds those a killed one left.
	ruleComment = "vmop-testnode"
	// pauseImage is the pod sandbox image, built from ./pause.
	pauseImage = "vmop.test/pause:devel"
)

// PauseImage is an image every node has (its pod sandbox's): a container
// that only waits, for pods that just hold volumes.
const PauseImage = pauseImage

// Storage classes of the node's PersistentVolumes; both bind when a pod is
// scheduled (WaitForFirstConsumer), as local volumes must.
const (
	StorageClassBlock = "local-block"
	// StorageClassFilesystem is the default class: claims that name none
	// (a VM's runner-data) get directories.
	StorageClassFilesystem = "local-dir"
)

// nodeControllers are what a real node needs beyond testcluster's
// controllers: claims binding to volumes, the node's not-ready taint
// removed once it is Ready, Deployments (the operator), the roles that
// aggregate into view/edit/admin, Services' endpoints, and the status of
// PodDisruptionBudgets, which evictions (kubectl drain) check.
var nodeControllers = []string{
	"persistentvolume-binder-controller",
	"node-lifecycle-controller",
	"deployment-controller",
	"replicaset-controller",
	"clusterrole-aggregation-controller",
	"endpointslice-controller",
	"pod-garbage-collector-controller",
	"daemonset-controller",
	"disruption-controller",
}

// Options tune Start.
type Options struct {
	// Images are image archives (as make images writes them) that the
	// node's containerd imports, so that pods find them without a pull.
	Images []string
}

// Node is a running single-node cluster.
type Node struct {
	*testcluster.Cluster
	Containerd         *testcontainerd.Containerd
	Kubelet, Scheduler *testcluster.Process
	// KubeProxy is also among the cluster's Processes.
	KubeProxy *testcluster.Process
	// Client reaches the API server as a member of system:masters.
	Client kubernetes.Interface

	dir            string
	binDir         string
	containerdOpts testcontainerd.Options
	kubeletArgs    []string
	kubeletHealthz string
	host           hostState
	dns            *clusterDNS
	unlock         func()
}

// Check says what is missing to run a node here.
func Check() error {
	if err := testcontainerd.Check(); err != nil {
		return err
	}
	// nfacct removes the counters kube-proxy leaves in the kernel.
	for _, bin := range []string{"ip", "iptables", "losetup", "nfacct"} {
		if _, err := exec.LookPath(bin); err != nil {
			return fmt.Errorf("%s not found: run `make deps`", bin)
		}
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, p)); err != nil {
			return fmt.Errorf("CNI plugin %s not found in %s: run `make deps` (installs containernetworking-plugins)", p, cniBinDir)
		}
	}
	return nil
}

// cniBinDir is where Debian's containernetworking-plugins install.
const cniBinDir = "/usr/lib/cni"

// Start runs the cluster and the node and waits until the node is Ready
// and schedulable. ctx bounds the start only.
func Start(ctx context.Context, opts Options) (*Node, error) {
	unlock, err := lockNode()
	if err != nil {
		return nil, err
	}
	if err = prepareHost(); err != nil {
		unlock()
		return nil, err
	}
	n, err := start(ctx, opts)
	if err != nil {
		unlock()
		return nil, err
	}
	n.unlock = unlock
	return n, nil
}

// start is Start for a caller that holds the lock and has prepared the host.
func start(ctx context.Context, opts Options) (n *Node, err error) {
	binDir, err := testcluster.KubeBinDir(ctx, "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy")
	if err != nil {
		return nil, err
	}
	n = &Node{binDir: binDir}
	if n.dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			if serr := n.Stop(); serr != nil {
				err = fmt.Errorf("%w (and stopping: %v)", err, serr)
			}
			n = nil
		}
	}()
	if err = n.host.record(); err != nil {
		return n, err
	}
	if err = n.setUpBridge(); err != nil {
		return n, err
	}
	if err = os.Mkdir(filepath.Join(n.dir, "cluster"), 0o700); err != nil {
		return n, err
	}
	n.Cluster, err = testcluster.Start(ctx, testcluster.Options{
		BinDir:          binDir,
		Dir:             filepath.Join(n.dir, "cluster"),
		Controllers:     true,
		MoreControllers: nodeControllers,
		Address:         IP,
	})
	if err != nil {
		return n, err
	}
	n.Client = n.Cluster.Client()
	if err = n.routeServices(); err != nil {
		return n, err
	}
	if n.dns, err = startClusterDNS(n.Client); err != nil {
		return n, fmt.Errorf("cluster DNS: %w", err)
	}
	if err = n.startContainerd(ctx, opts.Images); err != nil {
		return n, err
	}
	if n.Scheduler, err = testcluster.StartProcess(n.dir, "kube-scheduler", filepath.Join(binDir, "kube-scheduler"),
		"--kubeconfig="+n.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0"); err != nil {
		return n, err
	}
	if err = n.startKubelet(ctx, filepath.Join(binDir, "kubelet")); err != nil {
		return n, err
	}
	if err = n.startKubeProxy(ctx); err != nil {
		return n, err
	}
	if err = n.createStorageClasses(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// setUpBridge makes the bridge with the node's address before anything
// listens on it; the CNI bridge plugin then attaches pods to it.
func (n *Node) setUpBridge() error {
	if err := run("ip", "link", "add", Bridge, "type", "bridge"); err != nil {
		return err
	}
	n.host.undo("bridge", func() error { return run("ip", "link", "del", Bridge) })
	if err := run("ip", "addr", "add", IP+"/24", "dev", Bridge); err != nil {
		return err
	}
	return run("ip", "link", "set", Bridge, "up")
}

// routeServices keeps Service traffic on the machine, before kube-proxy
// runs and whatever it does. kube-proxy translates a ClusterIP or NodePort
// to an endpoint, and rejects a Service with none, but it has no rule for
// an address of the range that no Service holds: that would follow the
// default route out, so the whole range goes to the bridge.
//
// Nothing a pod or guest sends may leave the machine: the rule is in the
// mangle table, before kube-proxy's filter rules, which accept what they
// masquerade (a pod's packets to a NodePort). And the node's own Service
// traffic, which kube-proxy would send to any endpoint (one a test writes
// by hand may be anywhere), may reach only the node and its pods: in the
// filter table, after kube-proxy's translation.
func (n *Node) routeServices() error {
	if err := run("ip", "route", "replace", testcluster.ServiceCIDR, "dev", Bridge); err != nil {
		return err
	}
	n.host.undo("service route", func() error { return run("ip", "route", "del", testcluster.ServiceCIDR, "dev", Bridge) })
	if err := n.host.insertRule("mangle", "FORWARD", "-s", Subnet, "!", "-d", Subnet, "-j", "DROP"); err != nil {
		return err
	}
	// IP without /32: iptables-nft prints the rule without the mask, and
	// cleanStale finds a rule by what iptables prints only if it was
	// written so.
	for _, service := range []string{testcluster.ServiceCIDR, IP} {
		if err := n.host.insertRule("filter", "OUTPUT", "-m", "conntrack", "--ctstate", "DNAT",
			"--ctorigdst", service, "!", "-d", Subnet, "-j", "DROP"); err != nil {
			return err
		}
	}
	return nil
}

// startContainerd runs a containerd with the CRI plugin for the kubelet,
// imports the images and builds and imports the pause image.
func (n *Node) startContainerd(ctx context.Context, images []string) error {
	cniConf := filepath.Join(n.dir, "cni")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "vmop-test",
  "plugins": [{
    "type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
    "ipam": {"type": "host-local", "dataDir": %q,
      "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`, Bridge, filepath.Join(n.dir, "cni-ipam"), Subnet, IP)
	if err := os.WriteFile(filepath.Join(cniConf, "10-vmop-test.conflist"), []byte(conf), 0o644); err != nil {
		return err
	}
	n.containerdOpts = testcontainerd.Options{
		Namespace: "k8s.io",
		// Inside the node's directory, so that a later run finds the
		// containers of a killed one by their bundles' paths.
		Parent: n.dir,
		// restrict_oom_score_adj: this machine's root lacks
		// CAP_SYS_RESOURCE, so runc cannot give the sandbox the negative
		// oom_score_adj the kubelet asks for.
		CRI: fmt.Sprintf(`  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
`, pauseImage, cniBinDir, cniConf),
	}
	var err error
	if n.Containerd, err = testcontainerd.Run(n.containerdOpts); err != nil {
		return err
	}
	pause, err := n.buildPause()
	if err != nil {
		return err
	}
	for _, archive := range append([]string{pause}, images...) {
		if err := n.ImportImage(ctx, archive); err != nil {
			return err
		}
	}
	return nil
}

// buildPause builds the pause image of ./pause into the node's directory.
func (n *Node) buildPause() (string, error) { return n.buildImage("pause", pauseImage) }

// buildImage builds the image ref of the program ./NAME into the node's
// directory and returns its archive.
func (n *Node) buildImage(name, ref string) (string, error) {
	module, err := testcluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	b, err := imagebuild.Program(imagebuild.Options{
		Module:   module,
		Version:  "devel",
		Registry: "vmop.test",
		Created:  time.Unix(0, 0).UTC(),
		Out:      filepath.Join(n.dir, "images"),
	}, name, "./test/harness/testnode/"+name)
	if err != nil {
		return "", err
	}
	if b.Ref.String() != ref {
		return "", fmt.Errorf("%s image is %s, the node expects %s", name, b.Ref, ref)
	}
	return b.Archive, nil
}

// KubeletRootDir is the kubelet's --root-dir: not /var/lib/kubelet, as on
// k0s or microk8s.
func (n *Node) KubeletRootDir() string { return filepath.Join(n.dir, "kubelet") }

// startKubelet writes the kubelet's config and runs it; see RestartKubelet.
func (n *Node) startKubelet(ctx context.Context, bin string) error {
	ports, err := freeport.Ports(2)
	if err != nil {
		return err
	}
	root := n.KubeletRootDir()
	// What this machine needs (../shared/ENVIRONMENT.md): cgroup v1 with
	// the cgroupfs driver and no QoS hierarchy or allocatable
	// enforcement, no swap check, low eviction thresholds. The serving
	// port is on the bridge only; the API server, which reaches it for
	// logs, exec and port-forward, is let in without credentials.
	// syncFrequency stays at its default (1m): live changes must not
	// depend on a shorter one.
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: %d
healthzBindAddress: 127.0.0.1
healthzPort: %d
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
podLogsDir: %s
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, imagefs.available: 1%%, nodefs.inodesFree: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
clusterDNS: [%s]
clusterDomain: %s
`, IP, ports[0], ports[1], n.Containerd.Socket, filepath.Join(n.dir, "pod-logs"), IP, ClusterDomain)
	configFile := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(configFile, []byte(config), 0o644); err != nil {
		return err
	}
	n.kubeletHealthz = fmt.Sprintf("http://127.0.0.1:%d/healthz", ports[1])
	n.kubeletArgs = []string{bin,
		"--config=" + configFile,
		"--kubeconfig=" + n.Kubeconfig,
		"--root-dir=" + root,
		"--node-ip=" + IP,
		"--hostname-override=" + Name,
		"--v=2",
	}
	return n.runKubelet(ctx)
}

func (n *Node) runKubelet(ctx context.Context) error {
	var err error
	if n.Kubelet, err = testcluster.StartProcess(n.dir, "kubelet", n.kubeletArgs[0], n.kubeletArgs[1:]...); err != nil {
		return err
	}
	return testcluster.WaitUntil(ctx, n.Kubelet, 2*time.Minute, "node "+Name, func(ctx context.Context) error {
		// This kubelet's own health first: after a restart, the node is
		// still Ready from before.
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.kubeletHealthz, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("kubelet healthz: %s", resp.Status)
		}
		node, err := n.Client.CoreV1().Nodes().Get(ctx, Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		return Schedulable(node)
	})
}

// Schedulable says why node takes no pods: not Ready, or a taint that
// keeps pods off or evicts them; nil when it takes them.
func Schedulable(node *corev1.Node) error {
	if !testcluster.NodeReady(node) {
		return fmt.Errorf("not Ready: %v", node.Status.Conditions)
	}
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return fmt.Errorf("tainted %s", t.Key)
		}
	}
	return nil
}

// Stop ends everything Start began and undoes its changes to the host:
// pods first (their containers, networks and block volume mappings), then
// the kubelet, containerd, the control plane with kube-proxy, loop devices
// and network rules (kube-proxy's chains among them). It returns what
// could not be undone.
func (n *Node) Stop() error {
	var errs []error
	if n.Cluster != nil && n.Kubelet != nil {
		n.deletePods()
	}
	for _, p := range []*testcluster.Process{n.Kubelet, n.Scheduler} {
		if p != nil {
			p.Stop()
		}
	}
	if n.Containerd != nil {
		killContainers([]string{n.dir})
		errs = append(errs, n.Containerd.Stop())
		removePodNetworks()
	}
	if n.dns != nil {
		n.dns.stop()
	}
	if n.Cluster != nil {
		n.Cluster.Stop()
	}
	errs = append(errs, testcontainerd.UnmountBelow(n.dir)...)
	errs = append(errs, n.detachLoops()...)
	errs = append(errs, n.host.restore()...)
	if n.dir != "" {
		errs = append(errs, os.RemoveAll(n.dir))
	}
	if n.unlock != nil {
		n.unlock()
		n.unlock = nil
	}
	return errors.Join(errs...)
}

// deletePods stops the controllers that would make new pods, then deletes
// every pod and waits a while for the kubelet to tear them down: their
// containers, networks and volume mappings. Pods still there then (a stop
// already under way keeps its grace period, however long: the kubelet does
// not shorten it) are left to Stop's forced clean-up.
func (n *Node) deletePods() {
	if n.ControllerManager != nil {
		n.ControllerManager.Stop()
	}
	const wait = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	pods := n.Client.CoreV1().Pods(metav1.NamespaceAll)
	list, err := pods.List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	grace := int64(1)
	for _, p := range list.Items {
		_ = n.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace})
	}
	_ = eventually.Until(ctx, wait, func(ctx context.Context) error {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) > 0 {
			err = fmt.Errorf("%d pods left", len(list.Items))
		}
		return err
	})
}

// RestartKubelet stops the kubelet and starts it again with the same
// settings, as an upgrade or a crash would; pods keep running meanwhile.
func (n *Node) RestartKubelet(ctx context.Context) error {
	n.Kubelet.Stop()
	return n.runKubelet(ctx)
}

// RestartContainerd stops containerd (as systemctl restart does) and
// starts it again on its state; the shims, and the pods' containers they
// run, keep running meanwhile.
func (n *Node) RestartContainerd() error {
	if err := n.Containerd.Terminate(); err != nil {
		return err
	}
	return n.rerunContainerd()
}

// rerunContainerd starts containerd again on the state of the one that
// ended.
func (n *Node) rerunContainerd() error {
	opts := n.containerdOpts
	opts.Dir = n.Containerd.Dir
	c, err := testcontainerd.Run(opts)
	if err != nil {
		return err
	}
	n.Containerd = c
	return nil
}

// run runs a command and returns its output in the error.
func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
