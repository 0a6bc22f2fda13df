package ssh

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/prereq"
)

// TestProxyCommandReachesTheShell: ssh hands the ProxyCommand, its %
// expanded, to the shell; the words arrive as they were.
func TestProxyCommandReachesTheShell(t *testing.T) {
	prereq.Commands(t, "openssh-client", Client)
	dir := t.TempDir()
	// A stand-in for kubectl-vm that records its arguments, one per line.
	self := filepath.Join(dir, "kubectl vm's %d")
	out := filepath.Join(dir, "args")
	require.NoError(t, os.WriteFile(self, []byte("#!/bin/sh\nprintf '%s\\n' \"$@\" > '"+out+"'\n"), 0o755))
	kubeconfig := "/tmp/a b/it's %h"
	o := &Options{Name: "vm", Port: "22", self: self, namespace: "ns", kubeFlags: []string{"--kubeconfig=" + kubeconfig},
		SSHOptions: []string{"BatchMode=yes"}}
	cmd := exec.Command(Client, append([]string{"-F", "/dev/null"}, o.sshArgs()...)...)
	cmd.Env = append(os.Environ(), "HOME="+dir)
	_ = cmd.Run() // fails: the stand-in says nothing
	got, err := os.ReadFile(out)
	require.NoError(t, err, "the ProxyCommand did not run")
	require.Equal(t, []string{"port-forward", "--stdio", "22", "vm", "-n", "ns", "--kubeconfig=" + kubeconfig},
		strings.Split(strings.TrimSuffix(string(got), "\n"), "\n"))
}
