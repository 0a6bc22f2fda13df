package testnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestRuleArgs(t *testing.T) {
	require.Equal(t,
		[]string{"-A", "INPUT", "-m", "comment", "--comment", `kubernetes "health" check`, "-j", "KUBE-NODEPORTS"},
		ruleArgs(`-A INPUT -m comment --comment "kubernetes \"health\" check" -j KUBE-NODEPORTS`))
	require.Equal(t,
		[]string{"-A", "FORWARD", "-s", "10.99.0.0/24", "!", "-d", "10.99.0.0/24", "-m", "comment", "--comment", "vmop-testnode", "-j", "DROP"},
		ruleArgs(`-A FORWARD -s 10.99.0.0/24 ! -d 10.99.0.0/24 -m comment --comment vmop-testnode -j DROP`))
}

// TestShareNetnsDir removes a namespace as containerd does after ip netns
// ran beside it, in a mount namespace of its own with a /run of its own:
// with netnsDir plain at containerd's first mount, the removal fails (what
// stopped every pod of a node on a fresh machine); shared first, it works.
func TestShareNetnsDir(t *testing.T) {
	if mode := os.Getenv("VMOP_NETNS_MODE"); mode != "" {
		require.NoError(t, removeAfterIPNetns(mode == "shared"))
		return
	}
	skipWithout(t)
	for _, mode := range []string{"plain", "shared"} {
		cmd := exec.Command("unshare", "--mount", "--propagation", "private", os.Args[0], "-test.run=^TestShareNetnsDir$")
		cmd.Env = append(os.Environ(), "VMOP_NETNS_MODE="+mode)
		out, err := cmd.CombinedOutput()
		if mode == "plain" {
			require.Error(t, err, "%s", out)
			require.Contains(t, string(out), "device or resource busy")
		} else {
			require.NoError(t, err, "%s", out)
		}
	}
}

func removeAfterIPNetns(share bool) error {
	if err := unix.Mount("tmpfs", "/run", "tmpfs", 0, ""); err != nil {
		return err
	}
	if share {
		if err := shareNetnsDir(); err != nil {
			return err
		}
	}
	// containerd's new namespace: a file bind-mounted on.
	ns := filepath.Join(netnsDir, "cni-test")
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(ns, nil, 0o444); err != nil {
		return err
	}
	if err := unix.Mount("/proc/self/ns/net", ns, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	if out, err := exec.Command("sh", "-c", "ip netns add vmop-probe && ip netns del vmop-probe").CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns: %w: %s", err, out)
	}
	// containerd's removal.
	if err := unix.Unmount(ns, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount: %w", err)
	}
	return os.Remove(ns)
}
