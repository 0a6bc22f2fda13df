package vmclient

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// tableOf is a Table as the API server prints VMs without their
// metadata, with the columns named.
func tableOf(columns, cells string) string {
	return `{"kind":"Table","apiVersion":"meta.k8s.io/v1","columnDefinitions":[` + columns + `],"rows":[{"cells":[` + cells + `]}]}`
}

const columns = `{"name":"Name"},{"name":"State"},{"name":"Status"},{"name":"CPUs"},{"name":"RAM"},{"name":"Node"},
{"name":"IP"},{"name":"Console"},{"name":"Target CPUs"},{"name":"Target RAM"},{"name":"Age"}`

func TestDecodeSummaries(t *testing.T) {
	vms, ok, err := decodeSummaries(strings.NewReader(tableOf(columns,
		`"a","Running","Paused",2,"4Gi","n1",null,"192.0.2.1",3,"4Gi","1d"`)), "lab")
	require.NoError(t, err)
	require.True(t, ok)
	require.Len(t, vms, 1)
	require.Equal(t, "lab", vms[0].Namespace)
	require.Equal(t, "a", vms[0].Name)
	require.Equal(t, ModeOperator, vms[0].Mode)
	require.Equal(t, Summary{State: "Running", Status: "Paused", CPUs: "2", RAM: "4Gi", TargetCPUs: "3", TargetRAM: "4Gi",
		Node: "n1", Console: "192.0.2.1", Age: "1d"}, *vms[0].Summary)

	// An older CRD: its columns cannot tell what list shows.
	old := `{"name":"Name"},{"name":"State"},{"name":"Status"},{"name":"CPUs"},{"name":"RAM"},{"name":"Node"},{"name":"Age"}`
	vms, ok, err = decodeSummaries(strings.NewReader(tableOf(old, `"a","Running","Running",2,"4Gi","n1","1d"`)), "lab")
	require.NoError(t, err)
	require.False(t, ok)
	require.Nil(t, vms)

	// A VM no vm-operator has reported on yet.
	vms, ok, err = decodeSummaries(strings.NewReader(tableOf(columns, `"a",null,null,null,null,null,null,null,null,null,"1s"`)), "lab")
	require.NoError(t, err)
	require.False(t, ok)
	require.Nil(t, vms)

	// A server that sends the list instead of a Table.
	_, ok, err = decodeSummaries(strings.NewReader(`{"kind":"VirtualMachineList","items":[]}`), "lab")
	require.NoError(t, err)
	require.False(t, ok)

	_, _, err = decodeSummaries(strings.NewReader(`{"kind":"Table","rows":[{"cells":`), "lab")
	require.ErrorContains(t, err, "table of virtualmachines in lab: ")
}
