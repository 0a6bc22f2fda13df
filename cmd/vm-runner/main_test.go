package main

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
)

// runAsVMRunner makes the test binary vm-runner when the test starts it
// again with this variable set; the arguments follow "--".
const runAsVMRunner = "VMOP_TEST_RUN_AS_VM_RUNNER"

func TestMain(m *testing.M) {
	if os.Getenv(runAsVMRunner) != "" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"vm-runner"}, os.Args[i+1:]...)
				break
			}
		}
		main()
	}
	os.Exit(m.Run())
}

// TestExitCode: the process ends with the command's code.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"--version"}, 0},
		{[]string{"-c", t.TempDir() + "/missing.yaml"}, runnerconfig.ExitConfig},
		{[]string{"no-such-command"}, runnerconfig.ExitConfig},
		{[]string{"serial", "--no-such-flag"}, 1},
	} {
		cmd := exec.Command(os.Args[0], append([]string{"--"}, tc.args...)...)
		cmd.Env = append(os.Environ(), runAsVMRunner+"=1")
		out, err := cmd.CombinedOutput()
		require.Equal(t, tc.code, cmd.ProcessState.ExitCode(), "%v: %v\n%s", tc.args, err, out)
	}
}
