package main_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/prereq"
)

func kubectl(t *testing.T) string {
	t.Helper()
	prereq.Commands(t, "kubectl", "kubectl")
	path, err := exec.LookPath("kubectl")
	require.NoError(t, err)
	return path
}

func TestPluginList(t *testing.T) {
	r := runCmd(t, "", t.TempDir(), kubectl(t), "plugin", "list", "--name-only=false")
	require.Contains(t, strings.Split(r.stdout, "\n"), plugin(t), "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	require.NotContains(t, r.stderr, plugin(t), "no warning about our plugin")
}

func TestRenderThroughKubectl(t *testing.T) {
	const example = "../../examples/local-path-test-vm.yaml"
	viaKubectl := runCmd(t, "", "", kubectl(t), "vm", "render", "-f", example)
	require.Zero(t, viaKubectl.code, viaKubectl.stderr)
	direct := runCmd(t, "", "", plugin(t), "render", "-f", example)
	require.Zero(t, direct.code, direct.stderr)
	require.NotEmpty(t, direct.stdout)
	require.Equal(t, direct.stdout, viaKubectl.stdout)
	require.Empty(t, viaKubectl.stderr)
}

func TestHelpThroughKubectl(t *testing.T) {
	r := runCmd(t, "", t.TempDir(), kubectl(t), "vm", "--help")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "Usage:\n  kubectl vm [command]")
	require.Contains(t, r.stdout, `Use "kubectl vm [command] --help"`)
	r = runCmd(t, "", t.TempDir(), kubectl(t), "vm", "render", "--help")
	require.Contains(t, r.stdout, "kubectl vm render -f test-vm.yaml")
}

// TestKubectlKustomize tries the same with kubectl's built-in kustomize.
// kubectl 1.32 has no --enable-exec, and without it the function is
// skipped silently: the example's comment says so, and this test checks
// that the comment is still true (or that kubectl now renders correctly).
func TestKubectlKustomize(t *testing.T) {
	k := kubectl(t)
	dir := kustomizeDir(t)
	r := runCmd(t, "", t.TempDir(), k, "kustomize", "--enable-alpha-plugins", "--enable-exec", dir)
	if r.code == 0 {
		want := runCmd(t, "", dir, plugin(t), "render", "-f", "test-vm.yaml")
		assertSameObjects(t, want.stdout, r.stdout)
		t.Log("kubectl kustomize runs exec functions: update examples/kustomize/kustomization.yaml")
		return
	}
	require.Contains(t, r.stderr, "unknown flag: --enable-exec")
	r = runCmd(t, "", t.TempDir(), k, "kustomize", "--enable-alpha-plugins", dir)
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "kind: VirtualMachine", "without --enable-exec the function does not run")
	require.NotContains(t, r.stdout, "kind: StatefulSet")
}
