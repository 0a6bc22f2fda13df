package reporter

import (
	"context"
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubeapi"
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
	var vm vmObject
	err := r.c.Get(ctx, r.vm, &vm)
	if kubeapi.IsStatus(err, http.StatusNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("virtualmachine %s/%s: %w", r.namespace, r.name, err)
	}
	status := map[string]any{"conditions": []any{r.conditionObject(c, vm.Metadata.Generation, r.conditionsOf(&vm))}}
	if err := r.applyStatus(ctx, status, ImportFieldManager, nil); err != nil {
		return fmt.Errorf("virtualmachine %s/%s: write the %s condition: %w", r.namespace, r.name, c.Type, err)
	}
	return nil
}
