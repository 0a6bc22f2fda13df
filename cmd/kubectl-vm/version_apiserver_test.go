package main_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"

	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/testcluster"
)

func TestVersionClient(t *testing.T) {
	r := runCmd(t, "", t.TempDir(), kubectl(t), "vm", "version", "--client")
	require.Zero(t, r.code, r.stderr)
	require.Empty(t, r.stderr)
	golden.Assert(t, "testdata/version-client.golden", []byte(r.stdout))
}

// images are the images of the plugin's version.
var images = "Images: ghcr.io/vmop/vm-operator:" + testVersion + " (install), ghcr.io/vmop/vm-runner:" + testVersion + " (render)\n"

// TestVersionUnreachable: a cluster that cannot be asked is a warning.
func TestVersionUnreachable(t *testing.T) {
	kubeconfig := testcluster.UnreachableKubeconfig(t)
	r := runCmdEnv(t, []string{"KUBECONFIG=" + kubeconfig}, "", t.TempDir(), kubectl(t), "vm", "version")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "kubectl-vm "+testVersion+"\n"+images, r.stdout)
	require.Regexp(t, `^warning: cannot reach the cluster at https://127.0.0.1:1: .*connection refused\n$`, r.stderr)
}

// TestVersionOnAPIServer asks a real kube-apiserver, before and after
// kubectl vm install (no controllers run: the operator never becomes
// available).
func TestVersionOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	cs, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	info, err := cs.Discovery().ServerVersion()
	require.NoError(t, err)
	env := []string{"KUBECONFIG=" + c.Kubeconfig}
	version := func() string {
		t.Helper()
		r := runCmdEnv(t, env, "", t.TempDir(), kubectl(t), "vm", "version")
		require.Zero(t, r.code, r.stderr)
		require.Empty(t, r.stderr)
		return r.stdout
	}
	server := "Server: Kubernetes " + info.GitVersion + " at " + c.Config.Host + "\n"

	require.Equal(t, "kubectl-vm "+testVersion+"\n"+images+server+
		"CRD: vms.vmoperator.jdrupes.org not installed\n"+
		"Operator: vm-operator not installed in vmop-system\n", version())

	r := runCmdEnv(t, env, "", t.TempDir(), kubectl(t), "vm", "install")
	require.Zero(t, r.code, r.stderr)
	require.Equal(t, "kubectl-vm "+testVersion+"\n"+images+server+
		"CRD: vms.vmoperator.jdrupes.org installed\n"+
		"Operator: vm-operator in vmop-system, image ghcr.io/vmop/vm-operator:"+testVersion+
		", runner image ghcr.io/vmop/vm-runner:"+testVersion+", 0/1 available\n", version())

	// From a mirror: the operator names its runner image there.
	r = runCmdEnv(t, env, "", t.TempDir(), kubectl(t), "vm", "install", "--image-registry", "mirror.example:5000/vmop")
	require.Zero(t, r.code, r.stderr)
	require.Contains(t, version(), "Operator: vm-operator in vmop-system, image mirror.example:5000/vmop/vm-operator:"+testVersion+
		", runner image mirror.example:5000/vmop/vm-runner:"+testVersion+", 0/1 available\n")

	r = runCmdEnv(t, env, "", t.TempDir(), kubectl(t), "vm", "version", "-n", "elsewhere")
	require.Zero(t, r.code, r.stderr)
	require.True(t, strings.HasSuffix(r.stdout, "Operator: vm-operator not installed in elsewhere\n"), r.stdout)
}
