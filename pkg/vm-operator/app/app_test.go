package app

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/testcluster"
)

// The operator runs as a process in test/e2e; these cases check the flags
// that stop it before it starts.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workers", "0"}, "--workers must be at least 1, not 0"},
		{[]string{"--resync", "0s"}, "--resync must be at least 1s, not 0s"},
		{[]string{"--log-format", "xml"}, `--log-format must be text or json, not "xml"`},
		{[]string{"--leader-elect-renew-deadline", "20s"}, "--leader-elect-renew-deadline (20s) must be less than --leader-elect-lease-duration (15s)"},
		{[]string{"--leader-elect-retry-period", "10s"}, "--leader-elect-retry-period (10s) must be less than --leader-elect-renew-deadline (10s)"},
		{[]string{"--namespaces", "a,,b"}, "--namespaces has an empty entry"},
		{[]string{"--kubeconfig", "/nonexistent"}, "kubeconfig:"},
		{[]string{"extra"}, `unknown command "extra"`},
	} {
		var stderr bytes.Buffer
		cmd := NewCmd(&stderr)
		cmd.SetArgs(append(tc.args, "--kubeconfig", testcluster.UnreachableKubeconfig(t)))
		if tc.args[0] == "--kubeconfig" {
			cmd.SetArgs(tc.args)
		}
		err := cmd.Execute()
		require.Error(t, err, "%v", tc.args)
		require.Contains(t, err.Error(), tc.want, "%v", tc.args)
	}
}
