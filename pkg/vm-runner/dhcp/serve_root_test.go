package dhcp

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/prereq"
)

// TestServeWithoutPrivileges runs Serve as the user nobody, in a copy of
// this test binary that nobody may run.
func TestServeWithoutPrivileges(t *testing.T) {
	if os.Getenv("VMOP_DHCP_UNPRIVILEGED") == "1" {
		err := listenAndServe(context.Background(), "lo", testLease(), slog.New(slog.DiscardHandler))
		fmt.Printf("Serve: %v\n", err)
		return
	}
	prereq.Root(t, "runs the test binary as nobody")
	exe, err := os.Executable()
	require.NoError(t, err)
	dir, err := os.MkdirTemp("", "vmop-dhcp-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	b, err := os.ReadFile(exe)
	require.NoError(t, err)
	copied := filepath.Join(dir, filepath.Base(exe))
	require.NoError(t, os.WriteFile(copied, b, 0o755))

	cmd := exec.Command(copied, "-test.run=^TestServeWithoutPrivileges$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "VMOP_DHCP_UNPRIVILEGED=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "Serve: dhcp: lo: listen udp4 0.0.0.0:67: bind: permission denied (needs CAP_NET_BIND_SERVICE and CAP_NET_RAW)")
}
