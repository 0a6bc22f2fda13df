//go:build linux

package main_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/hostile"
)

// maxRSS bounds the plugin's peak resident memory on 300 MB of input: its
// heap may reach the 64 MiB at which rendering first collects garbage,
// the rest is the runtime and the binary.
const maxRSS = 160 << 20

// TestHostileHugeInput: 300 MB on stdin, to render and to the KRM
// function, are refused after reading the limit, with an error naming it.
func TestHostileHugeInput(t *testing.T) {
	const vm = "apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata:\n  name: a\nspec:\n  vm: {}\n"
	for _, c := range []struct {
		name       string
		head, line string
		args       []string
		stderr     string
	}{
		{"render", vm + "---\n", "# more\n", []string{"render", "-f", "-"},
			"-: document 2: larger than the limit of 4 MiB; the input after it is not read\nerror: 1 problem(s) in the input, nothing rendered\n"},
		{"KRM function", "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n", "- {apiVersion: v1, kind: ConfigMap}\n", nil,
			"error: ResourceList: larger than the limit of 16 MiB\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := hostile.NewDocument(c.head, c.line, hostile.HugeSize)
			r := runReader(t, nil, in, t.TempDir(), plugin(t), c.args...)
			rss := r.state.SysUsage().(*syscall.Rusage).Maxrss << 10 // KiB on Linux
			t.Logf("read %.1f MiB, peak RSS %.1f MiB", float64(in.BytesRead())/(1<<20), float64(rss)/(1<<20))
			require.Equal(t, 1, r.code)
			require.Empty(t, r.stdout)
			require.Equal(t, c.stderr, r.stderr)
			require.Less(t, in.BytesRead(), int64(32<<20), "the limit and what the pipe holds")
			require.Less(t, rss, int64(maxRSS))
		})
	}
}
