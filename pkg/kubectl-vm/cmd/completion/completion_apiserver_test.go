package completion_test

import (
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/vmop/vmop/test/harness/vmtest"
)

// TestOnAPIServer completes VM names, namespaces and contexts from a real
// kube-apiserver.
func TestOnAPIServer(t *testing.T) {
	vms := map[string][]string{"vms": {"web-2", "db", "web-1"}, "other": {"elsewhere"}}
	c := vmtest.NewCluster(t, "vms", "other")
	for ns, names := range vms {
		for _, name := range names {
			c.CreateVM(t, ns, name, map[string]any{})
		}
	}
	kc := []string{"--kubeconfig", c.Kubeconfig}
	with := func(args ...string) []string { return append(append([]string{}, kc...), args...) }

	require.Equal(t, []string{"db", "web-1", "web-2"}, complete(t, with("-n", "vms", "many", "")...))
	require.Equal(t, []string{"web-1", "web-2"}, complete(t, with("many", "-n", "vms", "w")...))
	require.Equal(t, []string{"db", "web-2"}, complete(t, with("-n", "vms", "many", "web-1", "")...), "no name twice")
	require.Equal(t, []string{"elsewhere"}, complete(t, with("--namespace=other", "one", "")...))
	require.Empty(t, complete(t, with("-n", "vms", "one", "web-1", "")...), "one completes its first argument only")
	require.Empty(t, complete(t, with("many", "")...), "namespace default has no VMs")

	namespaces := complete(t, with("many", "-n", "")...)
	require.Subset(t, namespaces, []string{"default", "other", "vms"})
	require.Equal(t, []string{"vms"}, complete(t, with("-n", "v")...))

	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Contexts)
	require.Equal(t, slices.Sorted(maps.Keys(cfg.Contexts)), complete(t, with("--context", "")...))
}
