// Package e2e holds integration tests, not end-to-end ones, whatever its
// name: vm-operator runs as a process against a real control plane (etcd,
// kube-apiserver, kube-controller-manager; see test/harness/testcluster),
// but its nodes are kwok's, so no pod really runs: no vm-runner, qemu or
// guest. What happens in a VM's pod is tested end to end by test/node.
// The name stays because make e2e, hack/e2ecluster and the docs use it.
// `make e2e` runs these tests alone.
package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/vm-node/deviceplugin"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// node is the kwok node that VM pods are placed on (no scheduler runs but
// in TestNodeAgent). It offers the node agent's devices.
const node = "node-1"

func TestMain(m *testing.M) {
	if prereq.ShortMain("etcd, kube-apiserver, kube-controller-manager and kwok") {
		os.Exit(0)
	}
	os.Exit(vmopbin.Main(m))
}

// env is a cluster with vmop's RBAC installed and a kubeconfig that acts
// as the operator's service account, so that its least privilege is
// exercised too.
type env struct {
	t          testing.TB
	c          *testcluster.Cluster
	kube       *kubernetes.Clientset
	dyn        dynamic.Interface
	kubeconfig string // the operator's
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvWith(t, nil)
}

// newEnvWith is newEnv with more in the cluster: more changes the
// options (e.g. more nodes, which do not offer the node agent's devices).
func newEnvWith(t testing.TB, more func(*testcluster.Options)) *env {
	t.Helper()
	opts := testcluster.Options{
		CRDs:        [][]byte{v1.CRDManifest},
		Controllers: true,
		Nodes:       []string{node},
	}
	if more != nil {
		more(&opts)
	}
	c := testcluster.NewWithOptions(t, opts)
	e := &env{t: t, c: c}
	// The scale benchmark creates a thousand VMs at once: the test's own
	// client limit must not be what it measures.
	cfg := rest.CopyConfig(c.Config)
	cfg.QPS, cfg.Burst = 2000, 4000
	var err error
	e.kube, err = kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	e.dyn, err = dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	e.offerNodeAgent(node)
	e.installRBAC()
	e.kubeconfig = e.serviceAccountKubeconfig(install.DefaultNamespace, install.OperatorName)
	return e
}

// offerNodeAgent makes the node offer nodeagent.Resource as a node with
// vm-node does: its device plugin advertises deviceplugin.DefaultDevices
// devices, which the kubelet puts in the node's capacity and allocatable.
// A VM pod without a tap NIC requests one. kwok runs a pod that names its
// node whatever it requests; the scheduler (TestNodeAgent) checks.
func (e *env) offerNodeAgent(name string) {
	t := e.t
	t.Helper()
	n := strconv.Itoa(deviceplugin.DefaultDevices)
	patch := fmt.Sprintf(`{"status":{"capacity":{%[1]q:%[2]q},"allocatable":{%[1]q:%[2]q}}}`, nodeagent.Resource, n)
	got, err := e.kube.CoreV1().Nodes().Patch(t.Context(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	q := got.Status.Allocatable[nodeagent.Resource]
	require.Equal(t, n, q.String(), "node %s offers %s", name, nodeagent.Resource)
}

// startScheduler runs kube-scheduler, which places the pods that name no
// node (the VMs of the other tests name node). The API server taints a
// new node not-ready, and no node lifecycle controller runs to lift that
// once kwok has made the node Ready (it would also judge kwok's
// heartbeats): startScheduler lifts it.
func (e *env) startScheduler() {
	t := e.t
	t.Helper()
	nodes, err := e.kube.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	require.NoError(t, err)
	for i := range nodes.Items {
		n := &nodes.Items[i]
		require.True(t, testcluster.NodeReady(n), "node %s is Ready", n.Name)
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		_, err := e.kube.CoreV1().Nodes().Update(t.Context(), n, metav1.UpdateOptions{})
		require.NoError(t, err)
	}
	p, err := e.c.StartProcess("kube-scheduler", filepath.Join(e.c.BinDir, "kube-scheduler"),
		"--kubeconfig="+e.c.Kubeconfig, "--leader-elect=false",
		"--bind-address=127.0.0.1", "--secure-port=0")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kube-scheduler log, last lines:\n%s", p.LogTail(30))
		}
	})
}

// installRBAC applies what `kubectl vm install` does but the CRD (already
// there), the Deployment (the operator runs as a test process) and the
// node agent's DaemonSet (no controller makes its pods, and under kwok
// they would run nothing: offerNodeAgent plays the agent's part).
func (e *env) installRBAC() {
	t, ctx := e.t, e.t.Context()
	objs, err := install.Objects(install.Options{})
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(e.kube.Discovery()))
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" || o.GetKind() == "Deployment" || o.GetKind() == "DaemonSet" {
			continue
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err, "%s", gvk)
		ri := e.dyn.Resource(m.Resource)
		var r dynamic.ResourceInterface = ri
		if o.GetNamespace() != "" {
			r = ri.Namespace(o.GetNamespace())
		}
		_, err = r.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: "e2e", Force: true})
		require.NoError(t, err, "%s %s", o.GetKind(), o.GetName())
	}
}

// serviceAccountKubeconfig writes a kubeconfig with a token of the
// service account.
func (e *env) serviceAccountKubeconfig(ns, sa string) string {
	t, ctx := e.t, e.t.Context()
	var token string
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}
	require.Eventually(t, func() bool {
		res, err := e.kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
		if err != nil {
			return false
		}
		token = res.Status.Token
		return true
	}, 20*time.Second, 100*time.Millisecond, "token of %s/%s", ns, sa)
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: e.c.Config.Host, CertificateAuthorityData: e.c.Config.CAData}
	kc.AuthInfos[sa] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: sa}
	kc.CurrentContext = "e2e"
	path := filepath.Join(e.c.Dir, sa+".kubeconfig")
	require.NoError(t, clientcmd.WriteToFile(*kc, path))
	return path
}

// operator is a running vm-operator process.
type operator struct {
	*testcluster.Process
	metrics string // URL of /metrics
	health  string // base URL of /healthz and /readyz
}

// startOperator runs vm-operator with short leader-election timings.
func (e *env) startOperator(name string, args ...string) *operator {
	t := e.t
	// Held open together: two single look-ups could return the same port.
	ports, err := freeport.Ports(2)
	require.NoError(t, err)
	port, healthPort := ports[0], ports[1]
	all := append([]string{
		"--kubeconfig=" + e.kubeconfig,
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(port),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(healthPort),
		"--leader-election-namespace=" + install.DefaultNamespace,
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		"-v=2",
	}, args...)
	p, err := e.c.StartProcess(name, vmopbin.Build(t, "vm-operator"), all...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log, last lines:\n%s", name, p.LogTail(60))
		}
	})
	return &operator{
		Process: p,
		metrics: "http://127.0.0.1:" + strconv.Itoa(port) + "/metrics",
		health:  "http://127.0.0.1:" + strconv.Itoa(healthPort),
	}
}

// terminate sends SIGTERM, as the kubelet does, and waits for the exit.
func (o *operator) terminate(t testing.TB) {
	t.Helper()
	require.NoError(t, syscall.Kill(o.Pid(), syscall.SIGTERM))
	select {
	case <-o.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not stop within 30 s of SIGTERM", o.Name)
	}
}

// probe returns the HTTP status of /healthz or /readyz, 0 if unreachable.
func (o *operator) probe(path string) int {
	resp, err := http.Get(o.health + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// logContains tells whether the operator logged s.
func (o *operator) logContains(s string) bool {
	b, _ := os.ReadFile(o.Log)
	return strings.Contains(string(b), s)
}

// writes sums the operator's vmop_writes_total.
func (o *operator) writes(t testing.TB) int {
	n := 0
	for _, v := range o.writesByKind(t) {
		n += v
	}
	return n
}

// scrape returns the operator's /metrics.
func (o *operator) scrape(t testing.TB) string {
	t.Helper()
	resp, err := http.Get(o.metrics)
	require.NoError(t, err, "metrics of %s", o.Name)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

// writesByKind reads vmop_writes_total by its kind label.
func (o *operator) writesByKind(t testing.TB) map[string]int {
	t.Helper()
	out := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(o.scrape(t)))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), `vmop_writes_total{kind="`)
		if !ok {
			continue
		}
		kind, value, _ := strings.Cut(rest, `"} `)
		v, err := strconv.ParseFloat(value, 64)
		require.NoError(t, err, sc.Text())
		out[kind] += int(v)
	}
	return out
}

// namespace creates a namespace for one test.
func (e *env) namespace(name string, labels map[string]string) string {
	_, err := e.kube.CoreV1().Namespaces().Create(e.t.Context(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
	}, metav1.CreateOptions{})
	require.NoError(e.t, err)
	return name
}

// createVM creates a VirtualMachine from YAML in namespace ns.
func (e *env) createVM(ns, manifest string) *unstructured.Unstructured {
	t := e.t
	u := &unstructured.Unstructured{}
	require.NoError(t, yaml.Unmarshal([]byte(manifest), &u.Object))
	u.SetNamespace(ns)
	res, err := e.vms(ns).Create(t.Context(), u, metav1.CreateOptions{})
	require.NoError(t, err)
	return res
}

func (e *env) vms(ns string) dynamic.ResourceInterface {
	return e.dyn.Resource(v1.GroupVersionResource).Namespace(ns)
}

func (e *env) getVM(ns, name string) *unstructured.Unstructured {
	vm, err := e.vms(ns).Get(e.t.Context(), name, metav1.GetOptions{})
	require.NoError(e.t, err)
	return vm
}

// patchVM merge-patches the VM's spec.vm.
func (e *env) patchVM(ns, name, vmPatch string) {
	_, err := e.vms(ns).Patch(e.t.Context(), name, types.MergePatchType, []byte(`{"spec":{"vm":`+vmPatch+`}}`), metav1.PatchOptions{})
	require.NoError(e.t, err)
}

func status(vm *unstructured.Unstructured) v1.VirtualMachineStatus {
	var st v1.VirtualMachineStatus
	raw, _, _ := unstructured.NestedMap(vm.Object, "status")
	b, _ := yaml.Marshal(raw)
	_ = yaml.Unmarshal(b, &st)
	return st
}

func condition(st v1.VirtualMachineStatus, typ string) metav1.Condition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// waitStatus waits until the VM's status satisfies ok and returns it.
func (e *env) waitStatus(ns, name string, timeout time.Duration, what string, ok func(v1.VirtualMachineStatus) bool) v1.VirtualMachineStatus {
	e.t.Helper()
	var st v1.VirtualMachineStatus
	deadline := time.Now().Add(timeout)
	for {
		vm, err := e.vms(ns).Get(e.t.Context(), name, metav1.GetOptions{})
		if err == nil {
			st = status(vm)
			if ok(st) {
				return st
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s/%s: %s: not within %v; status: %+v", ns, name, what, timeout, st)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
