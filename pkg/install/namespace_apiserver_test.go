package install_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/pkg/install"
)

// TestExistingNamespaceOnAPIServer: installing into a namespace that is
// not vmop's does not relabel it to admit privileged pods; it is refused
// unless the namespace admits them already, and then left as it is, also
// by uninstall.
func TestExistingNamespaceOnAPIServer(t *testing.T) {
	s := newServer(t)
	ctx := t.Context()
	cs, cluster, out := s.Client(), s.cluster, s.out
	namespace := func(name string, labels map[string]string) {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	labels := func(name string) map[string]string {
		ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		return ns.Labels
	}

	restricted := map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "kubernetes.io/metadata.name": "team-a"}
	namespace("team-a", restricted)
	namespace("team-b", nil)
	for _, opts := range []install.Options{{Namespace: "team-a"}, {Namespace: "team-b", NodeAgentOnly: true}} {
		objs, err := install.Objects(opts)
		require.NoError(t, err)
		out.Reset()
		err = cluster.Apply(ctx, objs)
		require.EqualError(t, err, "namespace "+opts.Namespace+" exists and is not vmop's: "+
			"kubectl vm install does not label it pod-security.kubernetes.io/enforce=privileged, which the node agent needs; "+
			"label it so yourself (kubectl label namespace "+opts.Namespace+" pod-security.kubernetes.io/enforce=privileged --overwrite) "+
			"if it may hold privileged pods, or install into a namespace of vmop's own")
		require.Empty(t, out.String(), "nothing is applied")
	}
	require.Equal(t, restricted, labels("team-a"))
	require.Equal(t, map[string]string{"kubernetes.io/metadata.name": "team-b"}, labels("team-b"))
	// Nothing was installed: not even the CRD, which comes first.
	_, err := cs.Discovery().ServerResourcesForGroupVersion("vmoperator.jdrupes.org/v1")
	require.Error(t, err)

	// A namespace that admits privileged pods already is left as it is.
	privileged := map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "kubernetes.io/metadata.name": "team-c"}
	namespace("team-c", privileged)
	objs, err := install.Objects(install.Options{Namespace: "team-c"})
	require.NoError(t, err)
	out.Reset()
	require.NoError(t, cluster.Apply(ctx, objs))
	require.Contains(t, out.String(), "namespace/team-c kept: it is not vmop's, and admits privileged pods already\n")
	require.NotContains(t, out.String(), "namespace/team-c serverside-applied")
	require.Equal(t, privileged, labels("team-c"))
	// Uninstalling does not delete what install did not create. (The CRD
	// stays, as uninstall keeps it: no controller would finish its
	// deletion here.)
	out.Reset()
	require.NoError(t, cluster.Delete(ctx, objs[1:]))
	require.Contains(t, out.String(), "namespace/team-c kept: it is not vmop's\n")
	require.Equal(t, privileged, labels("team-c"))

	// vmop's own namespace: created, and applied again.
	objs, err = install.Objects(install.Options{})
	require.NoError(t, err)
	for range 2 {
		out.Reset()
		require.NoError(t, cluster.Apply(ctx, objs))
		require.Contains(t, out.String(), "namespace/vmop-system serverside-applied\n")
	}
	require.Equal(t, "privileged", labels("vmop-system")["pod-security.kubernetes.io/enforce"])
}
