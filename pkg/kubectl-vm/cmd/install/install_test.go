package install_test

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/plugintest"
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
		plugintest.RequireFails(t, "install", tc.args, tc.err)
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
