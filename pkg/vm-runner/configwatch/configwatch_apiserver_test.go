package configwatch_test

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vmop/vmop/pkg/kubeapi"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vm-runner/configwatch"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/testcluster"
)

const ns = "vms"

// TestWatchWithRenderedAccess: with the ServiceAccount, Role and
// RoleBinding that kubectl vm render writes, the runner's account follows
// its own ConfigMap on a real API server, and may read no other.
func TestWatchWithRenderedAccess(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	require.NoError(t, c.CreateNamespace(ctx, ns))
	admin, err := kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)

	objs, problems, _ := render.FromJSON([]byte(`{"apiVersion":"vmoperator.jdrupes.org/v1","kind":"VirtualMachine",
		"metadata":{"name":"alpha","namespace":"vms"},"spec":{"vm":{"maximumCpus":2,"currentCpus":1}}}`),
		render.StreamOptions{Options: render.Options{ConfigAccess: true}})
	require.Empty(t, problems)
	require.NotNil(t, objs.ServiceAccount)
	_, err = admin.CoreV1().ServiceAccounts(ns).Create(ctx, objs.ServiceAccount, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().Roles(ns).Create(ctx, objs.Role, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = admin.RbacV1().RoleBindings(ns).Create(ctx, objs.RoleBinding, metav1.CreateOptions{})
	require.NoError(t, err)
	cm, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, objs.ConfigMap, metav1.CreateOptions{})
	require.NoError(t, err)
	other, err := admin.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "beta"}, Data: map[string]string{vmpod.ConfigFile: "beta"}}, metav1.CreateOptions{})
	require.NoError(t, err)

	runner := asAccount(c.APIConfig, objs.StatefulSet.Spec.Template.Spec.ServiceAccountName)
	w, err := configwatch.New(runner, ns, "alpha", vmpod.ConfigFile, slog.Default())
	require.NoError(t, err)
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(b []byte) { got <- string(b) }) }()
	require.Equal(t, cm.Data[vmpod.ConfigFile], next(t, got, done), "the config as it is")

	update := func(cm *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		cm, err := admin.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		require.NoError(t, err)
		return cm
	}
	// Another ConfigMap's change brings nothing; the own one's does.
	other.Data[vmpod.ConfigFile] = "beta 2"
	update(other)
	cm.Data[vmpod.ConfigFile] += "# changed\n"
	cm = update(cm)
	require.Equal(t, cm.Data[vmpod.ConfigFile], next(t, got, done), "the changed config")

	// A change of something else than the key sends nothing again.
	cm.Labels["touched"] = "yes"
	cm = update(cm)
	cm.Data[vmpod.ConfigFile] += "# again\n"
	update(cm)
	require.Equal(t, cm.Data[vmpod.ConfigFile], next(t, got, done), "only the key's changes")

	// The account reads its own ConfigMap only, and no Secret.
	cs, err := kubeapi.New(runner)
	require.NoError(t, err)
	for what, path := range map[string]string{
		"another ConfigMap": "/api/v1/namespaces/" + ns + "/configmaps/beta",
		"all ConfigMaps":    "/api/v1/namespaces/" + ns + "/configmaps",
		"a Secret":          "/api/v1/namespaces/" + ns + "/secrets/" + render.CloudInitSecretName("alpha"),
	} {
		err := cs.Get(ctx, path, nil)
		require.True(t, kubeapi.IsStatus(err, http.StatusForbidden), "%s: %v", what, err)
	}
}

// TestWatchNotAllowed: an account without the Role (the namespace's
// default, as a VM rendered with --config-access=false has) makes Run
// return ErrNotAllowed at once, so that the runner keeps to the volume.
func TestWatchNotAllowed(t *testing.T) {
	c := testcluster.New(t)
	ctx := t.Context()
	require.NoError(t, c.CreateNamespace(ctx, ns))
	w, err := configwatch.New(asAccount(c.APIConfig, "default"), ns, "alpha", vmpod.ConfigFile, slog.Default())
	require.NoError(t, err)
	err = w.Run(ctx, func([]byte) { t.Error("sent a config") })
	require.ErrorIs(t, err, configwatch.ErrNotAllowed)
}

// asAccount is cfg acting as the ServiceAccount ns/name, as its token does.
func asAccount(cfg *kubeapi.Config, name string) *kubeapi.Config {
	return testcluster.Impersonate(cfg, "system:serviceaccount:"+ns+":"+name,
		"system:serviceaccounts", "system:serviceaccounts:"+ns, "system:authenticated")
}

// next is the next config sent, or fails the test.
func next(t *testing.T, got <-chan string, done <-chan error) string {
	t.Helper()
	select {
	case s := <-got:
		return s
	case err := <-done:
		t.Fatalf("Run ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no config within 30 s")
	}
	return ""
}
