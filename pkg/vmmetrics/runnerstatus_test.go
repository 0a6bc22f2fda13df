package vmmetrics

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerstatus"
)

// The runner's condition types are named here without importing its
// package into the operator; this keeps the names equal.
func TestRunnerConditionTypes(t *testing.T) {
	require.Equal(t, runnerstatus.ConditionBooted, conditionBooted)
	require.Equal(t, runnerstatus.ConditionMediaLoaded, conditionMediaLoaded)
}
