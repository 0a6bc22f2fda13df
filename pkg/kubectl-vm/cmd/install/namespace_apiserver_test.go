package install_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vmop/vmop/test/harness/testcluster"
)

// TestExistingNamespaceOnAPIServer: "kubectl vm -n EXISTING install" does
// not make a namespace that is not vmop's admit privileged pods; it says
// what to do instead, and installs nothing.
func TestExistingNamespaceOnAPIServer(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	labels := map[string]string{"pod-security.kubernetes.io/enforce": "baseline", "kubernetes.io/metadata.name": "team"}
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team", Labels: labels}}, metav1.CreateOptions{})
	require.NoError(t, err)

	for _, args := range [][]string{{"install"}, {"install", "--node-agent-only"}} {
		r := run(t, append([]string{"--kubeconfig", c.Kubeconfig, "--cache-dir", t.TempDir(), "-n", "team"}, args...)...)
		require.EqualError(t, r.Err, "namespace team exists and is not vmop's: kubectl vm install does not label it "+
			"pod-security.kubernetes.io/enforce=privileged, which the node agent needs; label it so yourself "+
			"(kubectl label namespace team pod-security.kubernetes.io/enforce=privileged --overwrite) "+
			"if it may hold privileged pods, or install into a namespace of vmop's own")
		require.Empty(t, r.Stdout)
	}
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, labels, ns.Labels)
}
