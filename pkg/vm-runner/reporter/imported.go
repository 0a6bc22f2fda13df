package reporter

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// ImportFieldManager owns the Imported condition, which vm-runner import
// writes before the runner starts: the runner's own status writes, by
// FieldManager, leave it as it is.
const ImportFieldManager = "vm-runner-import"

// SetImported writes the VirtualMachine's Imported condition at once (a
// server-side apply of that condition alone). Without a VirtualMachine
// (GitOps mode) it does nothing: the events tell how an import went.
func (r *Reporter) SetImported(ctx context.Context, c metav1.Condition) error {
	c.Type = v1.ConditionImported
	vm, err := r.vms.Get(ctx, r.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("virtualmachine %s/%s: %w", r.namespace, r.name, err)
	}
	obj := r.applyObject(map[string]any{"conditions": []any{r.conditionObject(c, vm.GetGeneration(), r.conditionsOf(vm))}})
	if _, err := r.vms.ApplyStatus(ctx, r.name, obj, metav1.ApplyOptions{FieldManager: ImportFieldManager, Force: true}); err != nil {
		return fmt.Errorf("virtualmachine %s/%s: write the %s condition: %w", r.namespace, r.name, c.Type, err)
	}
	return nil
}
