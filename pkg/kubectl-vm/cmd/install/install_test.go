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
	require.Len(t, objs, 12)
	require.Equal(t, "CustomResourceDefinition", objs[0]["kind"])
	require.Equal(t, "Deployment", objs[11]["kind"])

	// -n moves everything; nothing else changes.
	other := run(t, "install", "--dry-run", "--image", testImage, "-n", "vmop")
	require.NoError(t, other.Err)
	require.Equal(t, strings.ReplaceAll(r.Stdout, "vmop-system", "vmop"), other.Stdout)
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
		{[]string{"--dry-run", "--image", "a b"}, `image "a b": must not contain spaces or control characters`},
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
	"validatingadmissionpolicy.admissionregistration.k8s.io/vm-runner-own-vm",
	"validatingadmissionpolicybinding.admissionregistration.k8s.io/vm-runner-own-vm",
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
	require.Regexp(t, `^apply customresourcedefinition.apiextensions.k8s.io/vms.vmoperator.jdrupes.org: .*forbidden: User "someone" cannot patch .*: this needs cluster-admin-like rights`, r.Err.Error())

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
	r = run(t, append(kubectl, "install", "--image", testImage, "--wait")...)
	require.NoError(t, r.Err)
	require.Equal(t, want.String()+"deployment.apps/vm-operator available\n", r.Stdout)
}
