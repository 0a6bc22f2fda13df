package vmmetrics

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic/dynamicinformer"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// On a real API server: the VMs are created with the CRD, their statuses
// applied to the status subresource as the operator and the runner do
// (each its part, with its field manager),
// and read through a dynamic informer's lister as the operator's cache
// holds them. The metrics equal those of the manifests, and a deleted
// VM's series are gone once the informer has seen the delete.
func TestInformerCacheOnAPIServer(t *testing.T) {
	c := vmtest.NewCluster(t, "prod", "dev")
	ctx := t.Context()
	vms := c.VMs
	for _, m := range []string{webVM, brokenVM, freshVM} {
		u := vm(t, m)
		st, hasStatus := u.Object["status"].(map[string]any)
		delete(u.Object, "status") // a create ignores it
		_, err := vms.Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
		require.NoError(t, err, u.GetName())
		if !hasStatus {
			continue
		}
		operator, runner := splitStatus(st)
		for manager, part := range map[string]map[string]any{"vm-operator": operator, "vm-runner": runner} {
			if len(part) == 0 {
				continue
			}
			apply := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1.APIVersion, "kind": v1.Kind,
				"metadata": map[string]any{"name": u.GetName(), "namespace": u.GetNamespace()},
				"status":   part,
			}}
			_, err = vms.Namespace(u.GetNamespace()).ApplyStatus(ctx, u.GetName(), apply,
				metav1.ApplyOptions{FieldManager: manager, Force: true})
			require.NoError(t, err, "%s's status of %s", manager, u.GetName())
		}
	}

	factory := dynamicinformer.NewDynamicSharedInformerFactory(c.Dyn, 0)
	informer := factory.ForResource(v1.GroupVersionResource)
	informer.Informer() // registers it before Start
	factory.Start(ctx.Done())
	t.Cleanup(factory.Shutdown)
	for gvr, ok := range factory.WaitForCacheSync(ctx.Done()) {
		require.True(t, ok, "cache of %s", gvr)
	}
	col := New(FromListers(informer.Lister()))
	require.NoError(t, testutil.CollectAndCompare(col, strings.NewReader(exposition(allSamples))))

	require.NoError(t, vms.Namespace("dev").Delete(ctx, "broken", metav1.DeleteOptions{}))
	eventually.Within(t, 30*time.Second, func() string {
		if n := vmsIn(t, col); n != 2 {
			return fmt.Sprintf("the scrape has %d VMs, want 2", n)
		}
		return ""
	})
	var rest []string
	for _, l := range strings.Split(allSamples, "\n") {
		if !strings.Contains(l, `name="broken"`) {
			rest = append(rest, l)
		}
	}
	require.NoError(t, testutil.CollectAndCompare(col, strings.NewReader(exposition(strings.Join(rest, "\n")))))
}

// splitStatus parts a status into what the operator writes
// (pkg/vm-operator/controller's opStatus) and what the runner writes (everything
// else, and its conditions); each applies its own part.
func splitStatus(st map[string]any) (operator, runner map[string]any) {
	operator, runner = map[string]any{}, map[string]any{}
	for k, v := range st {
		switch k {
		case "observedGeneration", "node":
			operator[k] = v
		case "conditions":
		default:
			runner[k] = v
		}
	}
	var opConds, runnerConds []any
	for _, c := range st["conditions"].([]any) {
		if typ := c.(map[string]any)["type"]; typ == v1.ConditionBooted || typ == v1.ConditionMediaLoaded {
			runnerConds = append(runnerConds, c)
		} else {
			opConds = append(opConds, c)
		}
	}
	operator["conditions"] = opConds
	if runnerConds != nil {
		runner["conditions"] = runnerConds
	}
	return operator, runner
}
