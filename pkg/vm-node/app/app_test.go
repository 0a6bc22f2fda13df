package app

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// kubeletRoot is a kubelet root dir as vm-node needs it: with pods/.
func kubeletRoot(t *testing.T) string {
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "pods"), 0o755))
	return root
}

// vm-node runs as a DaemonSet on real nodes (test/node); these cases
// check the flags that stop it before it serves anything.
func TestFlagErrors(t *testing.T) {
	noPods := t.TempDir()
	for _, tc := range []struct {
		env  string // NODE_NAME
		args []string
		want string
	}{
		{"", []string{"--kubelet-root-dir", kubeletRoot(t)}, "--node-name: empty, and no $NODE_NAME"},
		{"n", []string{"--node-name", "", "--kubelet-root-dir", kubeletRoot(t)}, "--node-name: empty, and no $NODE_NAME"},
		{"n", []string{"--kubelet-root-dir", "var/lib/kubelet"}, `--kubelet-root-dir "var/lib/kubelet": not an absolute path`},
		{"n", []string{"--kubelet-root-dir", noPods}, "--kubelet-root-dir " + noPods + ": stat " + filepath.Join(noPods, "pods") + ": no such file or directory (give the kubelet's --root-dir, mounted at the same path)"},
		// Checked when the agent is made, before anything serves.
		{"n", []string{"--kubelet-root-dir", kubeletRoot(t), "--runner-repository", "UPPER/case"}, `runner repository "UPPER/case"`},
		{"n", []string{"--kubeconfig", "/nonexistent"}, "kubeconfig:"},
		{"n", []string{"extra"}, `unknown command "extra" for "vm-node"`},
	} {
		t.Setenv("NODE_NAME", tc.env)
		var stderr bytes.Buffer
		cmd := NewCmd(&stderr)
		args := append([]string{"--kubeconfig", testcluster.UnreachableKubeconfig(t)}, tc.args...)
		cmd.SetArgs(args)
		err := cmd.Execute()
		require.Error(t, err, "%v", args)
		require.Contains(t, err.Error(), tc.want, "%v", args)
	}
}

func TestValidate(t *testing.T) {
	o := Options{NodeName: "n", KubeletRootDir: kubeletRoot(t)}
	require.NoError(t, o.Validate())
}

func TestDefaults(t *testing.T) {
	t.Setenv("NODE_NAME", "node-1")
	cmd := NewCmd(&bytes.Buffer{})
	require.NoError(t, cmd.ParseFlags(nil))
	f := cmd.Flags()
	for flag, want := range map[string]string{
		"node-name":         "node-1",
		"kubelet-root-dir":  "/var/lib/kubelet",
		"kubeconfig":        "",
		"device-plugin-dir": "",
	} {
		got, err := f.GetString(flag)
		require.NoError(t, err)
		require.Equal(t, want, got, "--%s", flag)
	}
	repos, err := f.GetStringArray("runner-repository")
	require.NoError(t, err)
	require.Equal(t, []string{"ghcr.io/vmop/vm-runner"}, repos)

	// Repeated, the flag replaces the default.
	cmd = NewCmd(&bytes.Buffer{})
	require.NoError(t, cmd.ParseFlags([]string{"--runner-repository", "example.org/a", "--runner-repository", "example.org/b"}))
	repos, err = cmd.Flags().GetStringArray("runner-repository")
	require.NoError(t, err)
	require.Equal(t, []string{"example.org/a", "example.org/b"}, repos)
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	cmd := NewCmd(&bytes.Buffer{})
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--help"})
	require.NoError(t, cmd.Execute())
	help := out.String()
	require.Contains(t, help, nodeagent.Resource)
	require.Contains(t, help, "/dev/kvm, /dev/net/tun and /dev/vhost-net")
	for _, flag := range []string{"--node-name", "--kubelet-root-dir", "--runner-repository", "--device-plugin-dir", "--kubeconfig"} {
		require.Contains(t, help, flag)
	}
	require.Contains(t, help, `(default "/var/lib/kubelet")`)
	require.Contains(t, help, "(default [ghcr.io/vmop/vm-runner])")
}
