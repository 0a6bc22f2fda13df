package uninstall_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/plugintest"
)

// run runs "kubectl vm ARGS" in-process.
func run(t *testing.T, args ...string) plugintest.Result {
	t.Helper()
	return plugintest.Run(t.Context(), "", args...)
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--delete-crd"}, "--delete-crd deletes every VirtualMachine in the cluster and, by owner references, their StatefulSets: add --yes to confirm"},
		{[]string{"-n", "Not_A_Namespace"}, `--namespace "Not_A_Namespace": a lowercase RFC 1123 label must consist of`},
		{[]string{"--node-agent-only", "--delete-crd", "--yes"}, "--delete-crd cannot be used with --node-agent-only: the CRD is not the node agent's"},
		{[]string{"vmop"}, `unknown command "vmop" for "kubectl vm uninstall"`},
	} {
		plugintest.RequireFails(t, "uninstall", tc.args, tc.err)
	}
}

func TestHelp(t *testing.T) {
	r := run(t, "uninstall", "--help")
	require.NoError(t, r.Err)
	require.Contains(t, r.Stdout, "Usage:\n  kubectl vm uninstall [flags]")
	require.Contains(t, r.Stdout, "PersistentVolumeClaims, the VMs' disks, are never deleted")
	require.Contains(t, r.Stdout, "--node-agent-only")
}
