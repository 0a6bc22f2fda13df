package main_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHelpExamples: "kubectl vm --help" has examples, of commands that
// exist, and so has the help of every command.
func TestHelpExamples(t *testing.T) {
	r := runCmd(t, "", t.TempDir(), kubectl(t), "vm", "--help")
	require.Zero(t, r.code, r.stderr)
	_, examples, ok := strings.Cut(r.stdout, "\nExamples:\n")
	require.True(t, ok, r.stdout)
	examples, _, _ = strings.Cut(examples, "\n\n"+"Available Commands:")
	require.Contains(t, examples, "  # Render VirtualMachine manifests into plain objects: no cluster needed\n  kubectl vm render ")

	cmds := availableCommands(t)
	for _, m := range regexp.MustCompile(`(?m)^  kubectl vm ([a-z-]+)`).FindAllStringSubmatch(examples, -1) {
		require.Contains(t, cmds, m[1], "an example uses kubectl vm %s", m[1])
	}

	for _, cmd := range cmds {
		if cmd == "help" {
			continue
		}
		r := runCmd(t, "", t.TempDir(), plugin(t), cmd, "--help")
		require.Zero(t, r.code, r.stderr)
		require.Contains(t, r.stdout, "\nExamples:\n  # ", "kubectl vm %s --help", cmd)
	}
}
