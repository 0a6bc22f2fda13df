package main_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// completions asks the real kubectl for the completions of "kubectl
// ARGS", as its shell scripts do, and returns the choices without their
// descriptions. For "kubectl vm ..." kubectl runs kubectl_complete-vm from
// PATH (binDir). Every completion of the plugin forbids file names.
func completions(t *testing.T, env []string, args ...string) []string {
	t.Helper()
	r := runCmdEnv(t, env, "", t.TempDir(), kubectl(t), append([]string{"__complete"}, args...)...)
	require.Zero(t, r.code, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Equal(t, ":4", lines[len(lines)-1], "directive NoFileComp; stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	var choices []string
	for _, l := range lines[:len(lines)-1] {
		choice, _, _ := strings.Cut(l, "\t")
		choices = append(choices, choice)
	}
	return choices
}

// availableCommands returns the commands that "kubectl vm --help" lists.
func availableCommands(t *testing.T) []string {
	t.Helper()
	r := runCmd(t, "", t.TempDir(), kubectl(t), "vm", "--help")
	require.Zero(t, r.code, r.stderr)
	_, list, ok := strings.Cut(r.stdout, "Available Commands:\n")
	require.True(t, ok, r.stdout)
	list, _, _ = strings.Cut(list, "\n\n")
	var cmds []string
	for _, l := range strings.Split(list, "\n") {
		cmds = append(cmds, strings.Fields(l)[0])
	}
	return cmds
}

func TestCompletionThroughKubectl(t *testing.T) {
	cmds := completions(t, nil, "vm", "")
	require.Equal(t, availableCommands(t), cmds)
	require.Subset(t, cmds, []string{"render", "install", "uninstall", "list", "status", "start", "stop", "completion", "version"})
	require.Equal(t, []string{"version"}, completions(t, nil, "vm", "ver"))
	require.Equal(t, []string{"bash", "zsh", "fish"}, completions(t, nil, "vm", "completion", ""))
	require.Contains(t, completions(t, nil, "vm", "install", "--"), "--dry-run")
}

// TestClusterCompletionThroughKubectl completes VM names, namespaces and
// contexts from a real kube-apiserver, through kubectl: "status" takes a
// VM name.
func TestClusterCompletionThroughKubectl(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	require.NoError(t, c.InstallCRD(ctx, v1.CRDManifest))
	require.NoError(t, c.CreateNamespace(ctx, "vms"))
	dyn, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	for _, name := range []string{"web", "db"} {
		_, err := dyn.Resource(v1.GroupVersionResource).Namespace("vms").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1.APIVersion,
			"kind":       v1.Kind,
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"vm": map[string]any{}},
		}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	env := []string{"KUBECONFIG=" + c.Kubeconfig}

	require.Equal(t, []string{"db", "web"}, completions(t, env, "vm", "status", "-n", "vms", ""))
	require.Equal(t, []string{"web"}, completions(t, env, "vm", "-n", "vms", "status", "w"))
	require.Equal(t, []string{"db", "web"}, completions(t, env, "vm", "logs", "-n", "vms", ""))
	require.Equal(t, []string{"web"}, completions(t, env, "vm", "console", "--serial", "-n", "vms", "w"))
	require.Empty(t, completions(t, env, "vm", "status", ""), "namespace default has no VMs")
	// ssh completes the name after USER@; port-forward the name only.
	require.Equal(t, []string{"debian@db", "debian@web"}, completions(t, env, "vm", "ssh", "-n", "vms", "debian@"))
	require.Equal(t, []string{"db"}, completions(t, env, "vm", "ssh", "-n", "vms", "d"))
	require.Equal(t, []string{"db", "web"}, completions(t, env, "vm", "port-forward", "-n", "vms", ""))
	require.Empty(t, completions(t, env, "vm", "port-forward", "-n", "vms", "web", ""), "ports are no VM names")
	require.Equal(t, []string{"db", "web"}, completions(t, env, "vm", "expose", "-n", "vms", ""))
	require.Equal(t, []string{"ClusterIP", "NodePort", "LoadBalancer"}, completions(t, env, "vm", "expose", "-n", "vms", "web", "--type", ""))
	require.Subset(t, completions(t, env, "vm", "status", "-n", ""), []string{"default", "kube-system", "vms"})
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	require.NoError(t, err)
	require.Equal(t, slices.Sorted(maps.Keys(cfg.Contexts)), completions(t, env, "vm", "--context", ""))
}
