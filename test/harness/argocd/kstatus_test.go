package argocd

import (
	"os"
	"path/filepath"
	"testing"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// TestKstatus reads the VMs recorded for the health check (testdata, from
// a real API server with the operator) as Flux's health checks and Helm's
// --wait do, with kstatus: done (Current) when the VM is as its spec says,
// Failed at once when it failed, in progress otherwise, also before the
// operator has seen it (the CRD's status default).
func TestKstatus(t *testing.T) {
	want := map[string]kstatus.Status{
		"apply-failed":          kstatus.FailedStatus,
		"generation-behind":     kstatus.InProgressStatus,
		"medium-unavailable":    kstatus.CurrentStatus, // runs; Argo CD's check says Degraded
		"medium-waits-for-tray": kstatus.CurrentStatus,
		"no-status":             kstatus.InProgressStatus,
		"pod-create-failed":     kstatus.FailedStatus,
		"restart-required":      kstatus.CurrentStatus,
		"running":               kstatus.CurrentStatus,
		"starting":              kstatus.InProgressStatus,
		"stopped":               kstatus.CurrentStatus,
		"stopping":              kstatus.InProgressStatus,
	}
	dir, err := Dir()
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(dir, "testdata", "*.yaml"))
	require.NoError(t, err)
	require.Len(t, files, len(want))
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		j, err := yaml.YAMLToJSON(b)
		require.NoError(t, err)
		var u unstructured.Unstructured
		require.NoError(t, u.UnmarshalJSON(j))
		res, err := kstatus.Compute(&u)
		require.NoError(t, err)
		name := filepath.Base(f[:len(f)-len(".yaml")])
		require.Equal(t, want[name], res.Status, "%s: %s", name, res.Message)
	}
}
