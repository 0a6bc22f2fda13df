package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// TestLinkerKeepsOnlyWhatIsCalled: vm-runner's binary is most of the
// runner's memory in every VM's pod (docs/figures.md), so nothing in it
// may defeat the linker's dead-code elimination: a reachable call of
// reflect's Method or MethodByName by a name not known at build time (as
// text/template makes; package expand runs it apart) has the linker keep
// every exported method of every type in an interface: 6 MB of 20. Nor
// does it link client-go (pkg/kubeapi serves it).
func TestLinkerKeepsOnlyWhatIsCalled(t *testing.T) {
	cmd := exec.Command("go", "build", "-tags", "grpcnotrace", "-ldflags=-dumpdep", "-o", filepath.Join(t.TempDir(), "vm-runner"), ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var deps bytes.Buffer
	cmd.Stderr = &deps
	require.NoError(t, cmd.Run(), "%.2000s", deps.String())
	require.NotZero(t, deps.Len(), "no -dumpdep output")
	var reflective, clientGo []string
	for sc := bufio.NewScanner(&deps); sc.Scan(); {
		from, _, _ := strings.Cut(sc.Text(), " -> ")
		if strings.HasSuffix(from, "<ReflectMethod>") && !slices.Contains(reflective, from) {
			reflective = append(reflective, from)
		}
		if strings.HasPrefix(from, "k8s.io/client-go/") && len(clientGo) < 5 {
			clientGo = append(clientGo, from)
		}
	}
	require.Empty(t, reflective, "functions that keep every method")
	require.Empty(t, clientGo, "client-go is linked")
}
