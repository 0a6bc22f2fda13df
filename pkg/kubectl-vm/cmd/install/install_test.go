package install_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// Golden files: testdata/install/<case>; rewrite them with
// "go test ./pkg/kubectl-vm/cmd/install -update".

// testImage makes the output independent of the version of the build.
const testImage = "ghcr.io/vmop/vm-operator:v0.0.0-test"

// run runs "kubectl vm ARGS" in-process.
func run(t *testing.T, args ...string) plugintest.Result {
	t.Helper()
	return plugintest.Run(t.Context(), "", args...)
}

// docs decodes a YAML stream.
func docs(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var out []map[string]any
	r := manifest.NewReader(strings.NewReader(stream))
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, json.Unmarshal(d.JSON, &obj))
		out = append(out, obj)
	}
}

func TestDryRun(t *testing.T) {
	r := run(t, "install", "--dry-run", "--image", testImage)
	require.NoError(t, r.Err)
	require.Empty(t, r.Stderr)
	golden.Assert(t, filepath.Join("testdata", "install", "dry-run.yaml"), []byte(r.Stdout))
	objs := docs(t, r.Stdout)
	require.Len(t, objs, 20)
	require.Equal(t, "CustomResourceDefinition", objs[0]["kind"])
	require.Equal(t, "DaemonSet", objs[18]["kind"])
	require.Equal(t, "Deployment", objs[19]["kind"])

	// -n moves everything; nothing else changes.
	other := run(t, "install", "--dry-run", "--image", testImage, "-n", "vmop")
	require.NoError(t, other.Err)
	require.Equal(t, strings.ReplaceAll(r.Stdout, "vmop-system", "vmop"), other.Stdout)
}

// nodeAgent is the container of the node agent's DaemonSet in objs, and
// the DaemonSet's volumes.
func nodeAgent(t *testing.T, objs []map[string]any) (container map[string]any, volumes []any) {
	t.Helper()
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o}
		if u.GetKind() == "DaemonSet" && u.GetName() == "vm-node" {
			cs, _, _ := unstructured.NestedSlice(o, "spec", "template", "spec", "containers")
			require.Len(t, cs, 1)
			vs, _, _ := unstructured.NestedSlice(o, "spec", "template", "spec", "volumes")
			return cs[0].(map[string]any), vs
		}
	}
	t.Fatal("no DaemonSet vm-node")
	return nil, nil
}

// TestDryRunNodeAgent: the node agent reaches the pods of a kubelet whose
// root is elsewhere (k0s), and its image and the runner images it serves
// come from the mirror.
func TestDryRunNodeAgent(t *testing.T) {
	r := run(t, "install", "--dry-run", "-o", "yaml", "--image", testImage,
		"--kubelet-root-dir", "/var/lib/k0s/kubelet", "--image-registry", "mirror.example:5000/vmop")
	require.NoError(t, r.Err)
	c, volumes := nodeAgent(t, docs(t, r.Stdout))
	require.Regexp(t, `^mirror.example:5000/vmop/vm-node:`, c["image"])
	require.Equal(t, []any{
		"--node-name=$(NODE_NAME)",
		"--kubelet-root-dir=/var/lib/k0s/kubelet",
		"--runner-repository=mirror.example:5000/vmop/vm-runner",
	}, c["args"])
	require.Equal(t, []any{
		map[string]any{"name": "kubelet-pods", "mountPath": "/var/lib/k0s/kubelet/pods", "mountPropagation": "HostToContainer"},
		map[string]any{"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
	}, c["volumeMounts"])
	require.Equal(t, []any{
		map[string]any{"name": "kubelet-pods", "hostPath": map[string]any{"path": "/var/lib/k0s/kubelet/pods", "type": "Directory"}},
		map[string]any{"name": "device-plugins", "hostPath": map[string]any{"path": "/var/lib/kubelet/device-plugins", "type": "Directory"}},
	}, volumes)
	require.Equal(t, map[string]any{"privileged": true, "readOnlyRootFilesystem": true}, c["securityContext"])

	// The default: the kubelet's usual root, ghcr.io.
	r = run(t, "install", "--dry-run", "--image", testImage)
	require.NoError(t, r.Err)
	c, _ = nodeAgent(t, docs(t, r.Stdout))
	require.Regexp(t, `^ghcr.io/vmop/vm-node:`, c["image"])
	require.Contains(t, c["args"], "--kubelet-root-dir=/var/lib/kubelet")
	require.Contains(t, c["args"], "--runner-repository=ghcr.io/vmop/vm-runner")
}

// TestDryRunRunnerRepositories: the node agent trusts the runner
// repository of --image-registry and each --runner-repository, in order and
// once each, with --node-agent-only too.
func TestDryRunRunnerRepositories(t *testing.T) {
	r := run(t, "install", "--dry-run", "--image", testImage,
		"--runner-repository", "registry.example.com/me/vm-runner", "--runner-repository=localhost:5000/vm-runner")
	require.NoError(t, r.Err)
	require.Empty(t, r.Stderr)
	c, _ := nodeAgent(t, docs(t, r.Stdout))
	require.Equal(t, []any{
		"--node-name=$(NODE_NAME)",
		"--kubelet-root-dir=/var/lib/kubelet",
		"--runner-repository=ghcr.io/vmop/vm-runner",
		"--runner-repository=registry.example.com/me/vm-runner",
		"--runner-repository=localhost:5000/vm-runner",
	}, c["args"])
	// Only the agent's arguments change, and the repositories of the
	// admission policy of its devices.
	plain := run(t, "install", "--dry-run", "--image", testImage)
	require.NoError(t, plain.Err)
	require.Equal(t, plain.Stdout, strings.NewReplacer(
		"        - --runner-repository=registry.example.com/me/vm-runner\n        - --runner-repository=localhost:5000/vm-runner\n", "",
		`'["ghcr.io/vmop/vm-runner", "registry.example.com/me/vm-runner", "localhost:5000/vm-runner"]'`, `'["ghcr.io/vmop/vm-runner"]'`,
	).Replace(r.Stdout))

	r = run(t, "install", "--dry-run", "--node-agent-only", "--image-registry", "mirror.example:5000/vmop",
		"--runner-repository", "mirror.example:5000/vmop/vm-runner", "--runner-repository", "ghcr.io/vmop/vm-runner",
		"--runner-repository", "ghcr.io/vmop/vm-runner")
	require.NoError(t, r.Err)
	c, _ = nodeAgent(t, docs(t, r.Stdout))
	require.Equal(t, []any{
		"--node-name=$(NODE_NAME)",
		"--kubelet-root-dir=/var/lib/kubelet",
		"--runner-repository=mirror.example:5000/vmop/vm-runner",
		"--runner-repository=ghcr.io/vmop/vm-runner",
	}, c["args"])
}

// TestDryRunNodeAgentOnly: the namespace and the node agent; nothing of
// the operator, its CRD or the runners' RBAC and admission policy.
func TestDryRunNodeAgentOnly(t *testing.T) {
	r := run(t, "install", "--dry-run", "-o", "yaml", "--node-agent-only", "-n", "vmop-agent")
	require.NoError(t, r.Err)
	require.Empty(t, r.Stderr)
	var got []string
	for _, o := range docs(t, r.Stdout) {
		u := unstructured.Unstructured{Object: o}
		got = append(got, u.GetKind()+"/"+u.GetName())
		if u.GetNamespace() != "" {
			require.Equal(t, "vmop-agent", u.GetNamespace(), got[len(got)-1])
		}
	}
	require.Equal(t, []string{
		"Namespace/vmop-agent",
		"ValidatingAdmissionPolicy/vm-node-devices",
		"ValidatingAdmissionPolicyBinding/vm-node-devices",
		"ServiceAccount/vm-node",
		"ClusterRole/vm-node",
		"ClusterRoleBinding/vm-node",
		"DaemonSet/vm-node",
	}, got)
	require.NotContains(t, r.Stdout, "kind: Deployment")
	require.NotContains(t, r.Stdout, "kind: CustomResourceDefinition")
	// Nothing names the operator but the label app.kubernetes.io/name of
	// every installed object.
	require.NotRegexp(t, `(?m)^\s*(- )?name: vm-operator$`, r.Stdout)
}

// TestDryRunJSON: a v1 List of the objects of the YAML golden file (no
// golden file of its own: it would be the same, three times the size).
func TestDryRunJSON(t *testing.T) {
	r := run(t, "install", "--dry-run", "--image", testImage, "-o", "json")
	require.NoError(t, r.Err)
	var list struct {
		APIVersion string           `json:"apiVersion"`
		Kind       string           `json:"kind"`
		Items      []map[string]any `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &list))
	require.Equal(t, "v1", list.APIVersion)
	require.Equal(t, "List", list.Kind)
	y := run(t, "install", "--dry-run", "--image", testImage)
	require.NoError(t, y.Err)
	if diff := cmp.Diff(docs(t, y.Stdout), list.Items); diff != "" {
		t.Errorf("-o json and -o yaml differ (-yaml +json):\n%s", diff)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--dry-run", "-o", "xml"}, `--output "xml" is not supported: use one of yaml, json`},
		{[]string{"-o", "yaml"}, "--output applies only with --dry-run"},
		{[]string{"--dry-run", "--wait"}, "--wait cannot be used with --dry-run: nothing is installed to wait for"},
		{[]string{"--dry-run", "-n", "Not_A_Namespace"}, `--namespace "Not_A_Namespace": a lowercase RFC 1123 label must consist of`},
		{[]string{"--dry-run", "--image-registry", "https://mirror.example"}, `--image-registry: "https://mirror.example" is not a registry with an optional path`},
		{[]string{"--dry-run", "--runner-repository", "ghcr.io/me/vm-runner:v1"}, `--runner-repository: "ghcr.io/me/vm-runner:v1" is not an image repository without tag or digest, such as registry.example:5000/vmop/vm-runner`},
		{[]string{"--dry-run", "--node-agent-only", "--runner-repository", "ghcr.io/me/vm-runner", "--runner-repository", "vm-runner"}, `--runner-repository: "vm-runner" is not an image repository without tag or digest`},
		{[]string{"--dry-run", "--image", "a b"}, `image "a b": must not contain spaces or control characters`},
		{[]string{"--dry-run", "--kubelet-root-dir", "var/lib/kubelet"}, `--kubelet-root-dir: "var/lib/kubelet" is not an absolute, clean path, such as /var/lib/kubelet`},
		{[]string{"--dry-run", "--kubelet-root-dir", "/var/lib/kubelet/"}, `--kubelet-root-dir: "/var/lib/kubelet/" is not an absolute, clean path, such as /var/lib/kubelet`},
		{[]string{"--dry-run", "--kubelet-root-dir", ""}, `--kubelet-root-dir: "" is not an absolute, clean path, such as /var/lib/kubelet`},
		{[]string{"--dry-run", "--node-agent-only", "--image", testImage}, "--image is the operator's, which --node-agent-only does not install"},
		{[]string{"--timeout", "0s"}, "--timeout 0s: must be positive"},
		{[]string{"vmop"}, `unknown command "vmop" for "kubectl vm install"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := run(t, append([]string{"install"}, tc.args...)...)
			require.ErrorContains(t, r.Err, tc.err)
			require.Empty(t, r.Stdout)
		})
	}
}

// TestUnreachable: one line that names the server, not one per object.
func TestUnreachable(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, nil, 0o600))
	r := run(t, "--kubeconfig", kubeconfig, "--server", "https://127.0.0.1:1", "install")
	require.Error(t, r.Err)
	require.Regexp(t, `^cannot reach the Kubernetes API server at https://127.0.0.1:1: dial tcp 127.0.0.1:1: .*connection refused$`, r.Err.Error())
	require.Empty(t, r.Stdout)
}

func TestHelp(t *testing.T) {
	r := run(t, "install", "--help")
	require.NoError(t, r.Err)
	require.Contains(t, r.Stdout, "Usage:\n  kubectl vm install [flags]")
	require.Contains(t, r.Stdout, "kubectl vm install --dry-run > vmop-install.yaml")
	require.Contains(t, r.Stdout, "ghcr.io/vmop/vm-operator:")
	require.Contains(t, r.Stdout, "--kubelet-root-dir string")
	require.Contains(t, r.Stdout, "/var/lib/k0s/kubelet for k0s, /var/snap/microk8s/common/var/lib/kubelet for microk8s")
	require.Contains(t, r.Stdout, "--node-agent-only")
	require.Contains(t, r.Stdout, "--runner-repository REPO")
	require.Contains(t, r.Stdout, "for VMs whose spec.image names a runner image from another repository")
}

var applied = []string{
	"customresourcedefinition.apiextensions.k8s.io/vms.vmoperator.jdrupes.org",
	"namespace/vmop-system",
	"serviceaccount/vm-operator",
	"clusterrole.rbac.authorization.k8s.io/vm-operator",
	"clusterrolebinding.rbac.authorization.k8s.io/vm-operator",
	"role.rbac.authorization.k8s.io/vm-operator-leader-election",
	"rolebinding.rbac.authorization.k8s.io/vm-operator-leader-election",
	"clusterrole.rbac.authorization.k8s.io/vm-runner",
	"clusterrole.rbac.authorization.k8s.io/vm-user",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-user",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-user",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-runner-own-vm",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-runner-own-vm",
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-node-devices",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-node-devices",
	"serviceaccount/vm-node",
	"clusterrole.rbac.authorization.k8s.io/vm-node",
	"clusterrolebinding.rbac.authorization.k8s.io/vm-node",
	"daemonset.apps/vm-node",
	"deployment.apps/vm-operator",
}

// TestInstallOnAPIServer installs into a real kube-apiserver, twice.
func TestInstallOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	kubectl := []string{"--kubeconfig", c.Kubeconfig, "--cache-dir", t.TempDir()}
	var want strings.Builder
	for _, ref := range applied {
		fmt.Fprintf(&want, "%s serverside-applied\n", ref)
	}

	// Someone without rights learns which object was refused and why.
	r := run(t, append(kubectl, "--as", "someone", "install")...)
	require.Error(t, r.Err)
	require.Regexp(t, `^get namespace/vmop-system: .*forbidden: User "someone" cannot get resource "namespaces" .*: this needs cluster-admin-like rights`, r.Err.Error())

	for range 2 { // the second run changes nothing and succeeds as well
		r := run(t, append(kubectl, "install", "--image", testImage)...)
		require.NoError(t, r.Err, r.Stderr)
		require.Equal(t, want.String(), r.Stdout)
	}

	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, obj := range docs(t, run(t, "install", "--dry-run", "--image", testImage).Stdout) {
		u := unstructured.Unstructured{Object: obj}
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		require.NoError(t, err)
		got, err := dyn.Resource(m.Resource).Namespace(u.GetNamespace()).Get(ctx, u.GetName(), metav1.GetOptions{})
		require.NoError(t, err, "%s %s", u.GetKind(), u.GetName())
		require.True(t, slices.ContainsFunc(got.GetManagedFields(), func(f metav1.ManagedFieldsEntry) bool {
			return f.Manager == "kubectl-vm" && f.Operation == metav1.ManagedFieldsOperationApply
		}), "%s %s is applied by kubectl-vm", u.GetKind(), u.GetName())
		if u.GetKind() == "CustomResourceDefinition" {
			conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
			require.True(t, slices.ContainsFunc(conds, func(c any) bool {
				m := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			}), "the CRD is established: %v", conds)
		}
	}

	// No controller manager runs, so the Deployment never becomes
	// available by itself.
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "deployment.apps/vm-operator is not available yet, giving up (see --timeout)")
	require.Equal(t, want.String(), r.Stdout)

	// What the Deployment controller would write once the pod is ready.
	deployments := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace("vmop-system")
	d, err := deployments.Get(ctx, "vm-operator", metav1.GetOptions{})
	require.NoError(t, err)
	status := fmt.Sprintf(`{"status":{"observedGeneration":%d,"replicas":1,"updatedReplicas":1,"readyReplicas":1,"availableReplicas":1}}`, d.GetGeneration())
	_, err = deployments.Patch(ctx, "vm-operator", types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status")
	require.NoError(t, err)

	// Then the node agent: not counted by a DaemonSet controller yet,
	// then ready on one node of two, then on both.
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "daemonset.apps/vm-node is not ready yet (the DaemonSet controller has not counted its nodes), giving up (see --timeout)")
	require.Equal(t, want.String()+"deployment.apps/vm-operator available\n", r.Stdout)
	daemonSets := dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}).Namespace("vmop-system")
	ds, err := daemonSets.Get(ctx, "vm-node", metav1.GetOptions{})
	require.NoError(t, err)
	dsStatus := func(available int) []byte {
		return fmt.Appendf(nil, `{"status":{"observedGeneration":%d,"desiredNumberScheduled":2,"currentNumberScheduled":2,"numberMisscheduled":0,`+
			`"updatedNumberScheduled":2,"numberReady":%[2]d,"numberAvailable":%[2]d}}`, ds.GetGeneration(), available)
	}
	_, err = daemonSets.Patch(ctx, "vm-node", types.MergePatchType, dsStatus(1), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait", "--timeout", "2s")...)
	require.EqualError(t, r.Err, "daemonset.apps/vm-node is not ready on every node yet (1 of 2 nodes not ready), giving up (see --timeout)")
	_, err = daemonSets.Patch(ctx, "vm-node", types.MergePatchType, dsStatus(2), metav1.PatchOptions{}, "status")
	require.NoError(t, err)
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait")...)
	require.NoError(t, r.Err)
	require.Equal(t, want.String()+"deployment.apps/vm-operator available\ndaemonset.apps/vm-node ready on 2 nodes\n", r.Stdout)

	// The node agent alone waits for the DaemonSet alone.
	r = run(t, append(kubectl, "install", "--node-agent-only", "--wait")...)
	require.NoError(t, r.Err)
	require.Equal(t, "namespace/vmop-system serverside-applied\n"+
		"validatingadmissionpolicy.admissionregistration.k8s.io/vm-node-devices serverside-applied\n"+
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-node-devices serverside-applied\n"+
		"serviceaccount/vm-node serverside-applied\n"+
		"clusterrole.rbac.authorization.k8s.io/vm-node serverside-applied\n"+
		"clusterrolebinding.rbac.authorization.k8s.io/vm-node serverside-applied\n"+
		"daemonset.apps/vm-node serverside-applied\n"+
		"daemonset.apps/vm-node ready on 2 nodes\n", r.Stdout)
}
