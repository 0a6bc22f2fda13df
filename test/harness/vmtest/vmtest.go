// Package vmtest is a test cluster holding VMs in both modes
// (docs/user-guide/vms.md), for the tests of the plugin's read commands
// and of pkg/kubectl-vm/vmclient.
//
// No operator runs: the VMs' objects and status are written as vm-operator,
// vm-runner and a GitOps tool would write them, so that outputs are fixed.
// kube-controller-manager makes the StatefulSets' pods and claims, and kwok
// runs the pods on Node.
package vmtest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// Namespaces and the node of the VMs.
const (
	Namespace      = "vms"
	OtherNamespace = "other"
	Node           = "node-1"
)

// The VMs. In Namespace: Desktop (operator mode, running, with a restart
// pending and a bound disk), Stopped (operator mode) and GitOps (GitOps
// mode, running, with a restart pending: Git raised its maximumRam). In
// OtherNamespace: Server (GitOps mode, stopped).
const (
	Desktop = "desktop"
	Stopped = "stopped"
	GitOps  = "gitops"
	Server  = "server"
)

const desktopVM = `
metadata: {name: desktop}
spec:
  nodeName: node-1
  vm:
    state: Running
    maximumCpus: 4
    currentCpus: 3
    maximumRam: 8Gi
    currentRam: 4Gi
    disks:
    - volumeClaimTemplate:
        metadata: {name: system}
        spec:
          storageClassName: local-path
          resources: {requests: {storage: 40Gi}}
    - cdrom: {image: installer.iso}
    - cdrom: {image: ""}
    display:
      spice: {port: 5910}
    networks:
    - tap: {bridge: br-lan}
`

const stoppedVM = `
metadata: {name: stopped}
spec:
  vm:
    maximumCpus: 2
    networks:
    - pod: {}
`

const gitopsVM = `
metadata: {name: gitops}
spec:
  nodeName: node-1
  vm:
    state: Running
    maximumCpus: 2
    maximumRam: 2Gi
    disks:
    - cdrom: {image: "https://example.com/live.iso"}
`

const serverVM = `
metadata: {name: server}
spec:
  vm:
    state: Stopped
    maximumCpus: 8
    maximumRam: 16Gi
    currentRam: 12Gi
    display: {}
    networks:
    - pod:
        ports: [{port: 22}, {port: 53, protocol: UDP}]
    - user: {}
`

// Env is the cluster with the VMs.
type Env struct {
	*testcluster.Cluster
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Start is a time before any object of the cluster was made.
	Start time.Time
}

// Now is a clock for outputs with fixed ages: ten and a half days after
// Start, so that every object made by New shows an AGE of 10d.
func (e *Env) Now() time.Time { return e.Start.Add(10*24*time.Hour + 12*time.Hour) }

// ConfigFlags are kubectl flags for the cluster and namespace.
func (e *Env) ConfigFlags(namespace string) *genericclioptions.ConfigFlags {
	f := genericclioptions.NewConfigFlags(false)
	f.KubeConfig = ptr.To(e.Kubeconfig)
	f.Namespace = ptr.To(namespace)
	return f
}

// New starts the cluster and makes the VMs; they are ready when it
// returns.
func New(t testing.TB) *Env {
	t.Helper()
	// Creation times have whole seconds.
	e := &Env{Start: time.Now().Truncate(time.Second)}
	e.Cluster = testcluster.NewWithOptions(t, testcluster.Options{
		CRDs:        [][]byte{v1.CRDManifest},
		Controllers: true,
		Nodes:       []string{Node},
	})
	var err error
	e.Kube, err = kubernetes.NewForConfig(e.Config)
	require.NoError(t, err)
	e.Dynamic, err = dynamic.NewForConfig(e.Config)
	require.NoError(t, err)
	for _, ns := range []string{Namespace, OtherNamespace} {
		require.NoError(t, e.CreateNamespace(t.Context(), ns))
	}

	desktop := e.createVM(t, desktopVM)
	e.apply(t, desktop)
	e.writeStatus(t, Desktop, map[string]any{
		"observedGeneration": 1,
		"node":               Node,
		"cpus":               2,
		"ram":                "4Gi",
		"printableStatus":    v1.ReasonRunning,
		"targetCpus":         3,
		"targetRam":          "4Gi",
		"accelerator":        "kvm",
		"consoleClient":      "192.0.2.10",
		"osinfo":             map[string]any{"id": "debian", "pretty-name": "Debian GNU/Linux 12 (bookworm)", "kernel-release": "6.1.0-50-cloud-amd64"},
		"hostname":           "desktop",
		"guestAgentVersion":  "7.2.15",
		"interfaces": []any{map[string]any{"name": "enp0s2", "mac": "52:54:00:12:34:56",
			"ipAddresses": []any{"192.0.2.20/24", "fe80::5054:ff:fe12:3456/64"}}},
		"conditions": []any{
			e.condition(v1.ConditionRunning, true, v1.ReasonRunning, "The runner pod runs on node-1.", 10*24*time.Hour),
			e.condition(v1.ConditionReady, true, v1.ReasonPodReady, "The runner reports the VM ready.", 10*24*time.Hour+10*time.Minute),
			e.condition(v1.ConditionRestartRequired, true, v1.ReasonRestartPending, "The spec changed in a way that applies only when the VM starts (e.g. maximumRam, disks, firmware); stop and start the VM to apply it.", 10*24*time.Hour+11*time.Hour),
			e.condition(v1.ConditionFailed, false, v1.ReasonNoFailure, "", 0),
			e.condition("Booted", true, "GuestAgentConnected", "The guest agent is connected.", 10*24*time.Hour+5*time.Minute),
		},
	})
	stopped := e.createVM(t, stoppedVM)
	e.apply(t, stopped)
	e.writeStatus(t, Stopped, map[string]any{
		"observedGeneration": 1,
		"printableStatus":    v1.ReasonStopped,
		"targetCpus":         2,
		"targetRam":          "1Gi",
		"conditions": []any{
			e.condition(v1.ConditionRunning, false, v1.ReasonStopped, "The VM is stopped.", 0),
			e.condition(v1.ConditionReady, false, v1.ReasonPodNotReady, "The VM has no pod.", 0),
			e.condition(v1.ConditionRestartRequired, false, v1.ReasonUpToDate, "The VM runs with its current spec.", 0),
			e.condition(v1.ConditionFailed, false, v1.ReasonNoFailure, "", 0),
		},
	})

	gitops := decodeVM(t, Namespace, gitopsVM)
	e.apply(t, gitops)
	server := decodeVM(t, OtherNamespace, serverVM)
	e.apply(t, server)

	e.waitPodReady(t, Desktop)
	e.waitPodReady(t, GitOps)
	e.bindClaims(t, Desktop)
	// The next sync from Git raises maximumRam, which applies at the
	// next start: the running pod keeps its template.
	gitops.Spec.VM.MaximumRAM = "4Gi"
	e.apply(t, gitops)
	return e
}

// decodeVM reads a VirtualMachine manifest without apiVersion and kind.
func decodeVM(t testing.TB, ns, manifest string) *v1.VirtualMachine {
	t.Helper()
	var vm v1.VirtualMachine
	require.NoError(t, yaml.UnmarshalStrict([]byte(manifest), &vm))
	vm.APIVersion, vm.Kind, vm.Namespace = v1.APIVersion, v1.Kind, ns
	return &vm
}

// createVM creates a VirtualMachine in Namespace.
func (e *Env) createVM(t testing.TB, manifest string) *v1.VirtualMachine {
	t.Helper()
	vm := decodeVM(t, Namespace, manifest)
	b, err := json.Marshal(vm)
	require.NoError(t, err)
	u := &unstructured.Unstructured{}
	require.NoError(t, u.UnmarshalJSON(b))
	unstructured.RemoveNestedField(u.Object, "status")
	_, err = e.Dynamic.Resource(v1.GroupVersionResource).Namespace(vm.Namespace).Create(t.Context(), u, metav1.CreateOptions{})
	require.NoError(t, err)
	return vm
}

// resources are the kinds that the VMs render to.
var resources = map[string]schema.GroupVersionResource{
	"ConfigMap":   {Version: "v1", Resource: "configmaps"},
	"Secret":      {Version: "v1", Resource: "secrets"},
	"StatefulSet": {Group: "apps", Version: "v1", Resource: "statefulsets"},
}

// apply applies what vm renders to, as the operator or a GitOps tool does.
func (e *Env) apply(t testing.TB, vm *v1.VirtualMachine) {
	t.Helper()
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	for _, obj := range objs.List() {
		gvk := obj.GetObjectKind().GroupVersionKind()
		gvr, ok := resources[gvk.Kind]
		require.True(t, ok, "no resource for %s", gvk.Kind)
		body, err := json.Marshal(obj)
		require.NoError(t, err)
		_, err = e.Dynamic.Resource(gvr).Namespace(vm.Namespace).Patch(t.Context(), vm.Name, types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "vmtest", Force: ptr.To(true)})
		require.NoError(t, err, "%s %s", gvk.Kind, vm.Name)
	}
}

// condition is a status condition that changed at Start+at.
func (e *Env) condition(typ string, on bool, reason, message string, at time.Duration) map[string]any {
	status := metav1.ConditionFalse
	if on {
		status = metav1.ConditionTrue
	}
	return map[string]any{
		"type":               typ,
		"status":             string(status),
		"reason":             reason,
		"message":            message,
		"observedGeneration": 1,
		"lastTransitionTime": e.Start.Add(at).UTC().Format(time.RFC3339),
	}
}

// writeStatus sets the status of the VirtualMachine name in Namespace.
func (e *Env) writeStatus(t testing.TB, name string, status map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"status": status})
	require.NoError(t, err)
	_, err = e.Dynamic.Resource(v1.GroupVersionResource).Namespace(Namespace).Patch(t.Context(), name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	require.NoError(t, err)
}

// waitPodReady waits until kwok runs the pod of the VM name in Namespace.
func (e *Env) waitPodReady(t testing.TB, name string) {
	t.Helper()
	eventually.Within(t, 60*time.Second, func() string {
		pod, err := e.Kube.CoreV1().Pods(Namespace).Get(t.Context(), name+"-0", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		for _, cond := range pod.Status.Conditions {
			if pod.Status.Phase == corev1.PodRunning && cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
				return ""
			}
		}
		return fmt.Sprintf("pod %s: phase %s, not ready", pod.Name, pod.Status.Phase)
	})
}

// bindClaims marks the claims of the VM name in Namespace bound with what
// they request, as a provisioner would; the cluster has none.
func (e *Env) bindClaims(t testing.TB, name string) {
	t.Helper()
	claims := e.Kube.CoreV1().PersistentVolumeClaims(Namespace)
	sel := labels.SelectorFromSet(render.SelectorLabels(name)).String()
	list, err := claims.List(t.Context(), metav1.ListOptions{LabelSelector: sel})
	require.NoError(t, err)
	require.NotEmpty(t, list.Items, "claims of %s", name)
	for _, pvc := range list.Items {
		pvc.Status.Phase = corev1.ClaimBound
		pvc.Status.AccessModes = pvc.Spec.AccessModes
		pvc.Status.Capacity = corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]}
		_, err := claims.UpdateStatus(t.Context(), &pvc, metav1.UpdateOptions{})
		require.NoError(t, err, "claim %s", pvc.Name)
	}
}

// Run runs "kubectl vm ARGS" against e with the command that newCmd makes
// (given kubectl's flags and the streams) as the only subcommand, so that
// a test can hand it e's clock.
func (e *Env) Run(t *testing.T, newCmd func(*genericclioptions.ConfigFlags, genericiooptions.IOStreams) *cobra.Command, args ...string) plugintest.Result {
	t.Helper()
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	root := &cobra.Command{Use: "vm", SilenceUsage: true, SilenceErrors: true}
	flags := genericclioptions.NewConfigFlags(false)
	flags.AddFlags(root.PersistentFlags())
	root.AddCommand(newCmd(flags, streams))
	root.SetArgs(append([]string{"--kubeconfig", e.Kubeconfig}, args...))
	err := root.ExecuteContext(t.Context())
	return plugintest.Result{Stdout: out.String(), Stderr: errOut.String(), Err: err}
}
