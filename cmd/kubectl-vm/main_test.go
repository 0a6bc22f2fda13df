package main_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// These tests run the real plugin binary, through the real kubectl where
// kubectl is involved.

var moduleRoot string

// testVersion is the version the binaries are built with, so that their
// output does not depend on the checkout.
const testVersion = "v0.0.0-test"

var versionFlags = []string{"-ldflags", "-X github.com/vmop/vmop/pkg/version.Version=" + testVersion}

// plugin is the built kubectl-vm, beside kubectl_complete-vm in binDir.
func plugin(t *testing.T) string {
	t.Helper()
	vmopbin.Build(t, "kubectl_complete-vm", versionFlags...)
	return vmopbin.Build(t, "kubectl-vm", versionFlags...)
}

// binDir holds the built kubectl-vm and kubectl_complete-vm.
func binDir(t *testing.T) string { return filepath.Dir(plugin(t)) }

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	var err error
	if moduleRoot, err = testcluster.ModuleRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return vmopbin.Main(m)
}

type result struct {
	stdout, stderr string
	code           int
	state          *os.ProcessState
}

// runCmd runs name with args, stdin, and an environment where PATH starts
// with binDir and kubectl finds no cluster config.
func runCmd(t *testing.T, stdin, dir, name string, args ...string) result {
	t.Helper()
	return runCmdEnv(t, nil, stdin, dir, name, args...)
}

// runCmdEnv is runCmd with env added to (and overriding) that environment.
func runCmdEnv(t *testing.T, env []string, stdin, dir, name string, args ...string) result {
	t.Helper()
	return runReader(t, env, strings.NewReader(stdin), dir, name, args...)
}

// runReader is runCmdEnv with stdin read from a reader.
func runReader(t *testing.T, env []string, stdin io.Reader, dir, name string, args ...string) result {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(),
		"PATH="+binDir(t)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+filepath.Join(t.TempDir(), "no-kubeconfig"),
	), env...)
	cmd.Stdin = stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		code = exitErr.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code, state: cmd.ProcessState}
}

func TestInvalidFile(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte(`apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: bad-vm
spec:
  vm:
    maximumCpus: 2
    currentCpus: 4
    maximumRam: 4Gx
    currentRam: 1Gi
`), 0o644))
	r := runCmd(t, "", t.TempDir(), plugin(t), "render", "-f", bad)
	require.Equal(t, 1, r.code)
	require.Empty(t, r.stdout)
	require.Equal(t, bad+": document 1: bad-vm: spec.vm.currentCpus: Invalid value: 4: must not exceed maximumCpus (2)\n"+
		bad+": document 1: bad-vm: spec.vm.maximumRam: Invalid value: \"4Gx\": must be a quantity such as 4Gi or 512Mi\n"+
		"error: 2 problem(s) in the input, nothing rendered\n", r.stderr)
}

// TestFunctionMode: without arguments and with a ResourceList on stdin
// (not a terminal) the binary is a KRM function.
func TestFunctionMode(t *testing.T) {
	in := `apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: vmoperator.jdrupes.org/v1
  kind: VirtualMachine
  metadata:
    name: fn-vm
  spec:
    vm: {}
`
	r := runCmd(t, in, t.TempDir(), plugin(t))
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, r.stdout, "kind: ResourceList")
	require.Contains(t, r.stdout, "kind: StatefulSet")
	require.NotContains(t, r.stdout, "kind: VirtualMachine")

	bad := strings.Replace(in, "vm: {}", "vm: {state: Paused}", 1)
	r = runCmd(t, bad, t.TempDir(), plugin(t))
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stdout, "severity: error")
	require.Contains(t, r.stdout, "path: spec.vm.state")
	require.Contains(t, r.stderr, "spec.vm.state")
}

// kustomizeDir copies examples/kustomize and the plugin into a temp dir,
// as its kustomization.yaml tells users to do.
func kustomizeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(moduleRoot, "examples", "kustomize")
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		copyFile(t, filepath.Join(src, e.Name()), filepath.Join(dir, e.Name()), 0o644)
	}
	copyFile(t, plugin(t), filepath.Join(dir, "kubectl-vm"), 0o755)
	return dir
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, mode))
}

// TestKustomizeFunction runs examples/kustomize through kustomize's own
// engine (the krusty package that kubectl kustomize embeds) with exec
// functions enabled, so the real binary is called as kustomize calls it.
// The result must be what kubectl vm render gives. The test's working
// directory has no kubectl-vm, so "./kubectl-vm" resolving shows that the
// exec path is relative to the kustomization's directory.
func TestKustomizeFunction(t *testing.T) {
	dir := kustomizeDir(t)
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = types.MakePluginConfig(types.PluginRestrictionsNone, types.BploUseStaticallyLinked)
	opts.PluginConfig.FnpLoadingOptions.EnableExec = true
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	require.NoError(t, err)
	out, err := resMap.AsYaml()
	require.NoError(t, err)

	want := runCmd(t, "", dir, plugin(t), "render", "-f", "test-vm.yaml")
	require.Zero(t, want.code, want.stderr)
	assertSameObjects(t, want.stdout, string(out))
}

// assertSameObjects compares two YAML streams as sets of parsed objects;
// kustomize may reorder them.
func assertSameObjects(t *testing.T, want, got string) {
	t.Helper()
	w, g := parseObjects(t, want), parseObjects(t, got)
	require.NotEmpty(t, w)
	for _, o := range g {
		require.NotEqual(t, "VirtualMachine", o["kind"], "no VirtualMachine is left")
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("objects differ (-render +kustomize):\n%s", diff)
	}
}

func parseObjects(t *testing.T, stream string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	r := manifest.NewReader(strings.NewReader(stream))
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		var o map[string]any
		require.NoError(t, json.Unmarshal(d.JSON, &o))
		objs = append(objs, o)
	}
	key := func(o map[string]any) string {
		m, _ := o["metadata"].(map[string]any)
		return fmt.Sprint(o["kind"], "/", m["namespace"], "/", m["name"])
	}
	slices.SortFunc(objs, func(a, b map[string]any) int { return strings.Compare(key(a), key(b)) })
	return objs
}
