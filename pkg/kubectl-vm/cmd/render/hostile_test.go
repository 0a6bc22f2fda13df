package render_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/render"
	"github.com/vmop/vmop/test/harness/hostile"
)

func TestHostileFunction(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "krm", "render", "input.yaml"))
	require.NoError(t, err)
	base := string(b)
	const vmLine, cmLine = "        hostname: test-vm\n", "    key: value\n"
	for _, c := range []struct {
		name, in string
		err      string // part of the error
	}{
		{"100k nested sequences in the VM", strings.Replace(base, vmLine, "        x: "+strings.Repeat("[", 100_000)+"\n", 1),
			"MalformedYAMLError: yaml: line 17: exceeded max depth of 10000"},
		{"100k nested block sequences in a ConfigMap", strings.Replace(base, cmLine, "    x:\n    "+strings.Repeat("- ", 100_000)+"x\n", 1),
			"MalformedYAMLError: yaml: line 41: exceeded max depth of 10000"},
		{"billion laughs in the VM", strings.Replace(base, vmLine, hostile.Laughs("        "), 1),
			"[error] vmoperator.jdrupes.org/v1/VirtualMachine/vmop-demo/test-vm: yaml: document contains excessive aliasing"},
		{"aliases to a long string in the VM", strings.Replace(base, vmLine,
			"        s: &s "+strings.Repeat("x", 64<<10)+"\n        l: ["+strings.Repeat("*s, ", 3000)+strings.Repeat("1, ", 60)+"1]\n", 1),
			"[error] vmoperator.jdrupes.org/v1/VirtualMachine/vmop-demo/test-vm: aliases make the document larger than the limit of 4 MiB"},
		{"duplicate key in the VM", strings.Replace(base, "      maximumCpus: 4\n", "      maximumCpus: 4\n      maximumCpus: 8\n", 1),
			`[error] vmoperator.jdrupes.org/v1/VirtualMachine/vmop-demo/test-vm: line 21: key "maximumCpus" already set at line 20`},
		{"duplicate key in a ConfigMap", strings.Replace(base, cmLine, cmLine+cmLine, 1),
			`[error] v1/ConfigMap/vmop-demo/unrelated: line 42: key "key" already set at line 41`},
		{"invalid UTF-8", strings.Replace(base, "key: value", "key: \xf0\x9f", 1), "ResourceList: line 41: invalid UTF-8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			n := hostile.Allocated(func() { err = render.RunFunction(strings.NewReader(c.in), &out) })
			t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
			require.ErrorContains(t, err, c.err)
			require.Less(t, n, uint64(hostile.MemoryBound))
		})
	}
}

// TestHostileFunctionNodes: a list of many tiny nodes is refused before
// kyaml writes it back, which would cost some 1.5 GiB more.
func TestHostileFunctionNodes(t *testing.T) {
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- {apiVersion: v1, kind: ConfigMap, x: [" + strings.Repeat("a,", 1<<20) + "a]}\n"
	var out bytes.Buffer
	var err error
	n := hostile.Allocated(func() { err = render.RunFunction(strings.NewReader(in), &out) })
	t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
	require.ErrorContains(t, err, "ResourceList: more than 1048576 YAML nodes")
	require.NotContains(t, out.String(), "a, a")
	require.Less(t, n, uint64(8*hostile.MemoryBound), "reading costs what kyaml takes")
}

// TestHostileFunctionAliases: anchors and aliases in an item passed through
// are written as they came, not expanded.
func TestHostileFunctionAliases(t *testing.T) {
	in := "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: laughs\n  x:\n" +
		hostile.Laughs("    ")
	var out bytes.Buffer
	var err error
	n := hostile.Allocated(func() { err = render.RunFunction(strings.NewReader(in), &out) })
	t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
	require.NoError(t, err)
	require.Contains(t, out.String(), "a9: &a9 [*a8, *a8,")
	require.Less(t, n, uint64(hostile.MemoryBound))
}

func TestHostileFunctionEncodings(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "krm", "render", "input.yaml"))
	require.NoError(t, err)
	lf := string(b)
	var want bytes.Buffer
	require.NoError(t, render.RunFunction(strings.NewReader(lf), &want))
	crlf := strings.ReplaceAll(lf, "\n", "\r\n")
	for name, in := range map[string]string{"BOM": "\ufeff" + lf, "CRLF": crlf, "BOM and CRLF": "\ufeff" + crlf} {
		t.Run(name, func(t *testing.T) {
			var got bytes.Buffer
			require.NoError(t, render.RunFunction(strings.NewReader(in), &got))
			require.Equal(t, want.String(), got.String())
		})
	}
}

// TestHostileFunctionHugeInput: 300 MB on stdin are refused after reading
// the limit.
func TestHostileFunctionHugeInput(t *testing.T) {
	in := hostile.NewDocument("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n", "- {apiVersion: v1, kind: ConfigMap}\n", hostile.HugeSize)
	var err error
	n := hostile.Allocated(func() { err = render.RunFunction(in, &bytes.Buffer{}) })
	t.Logf("allocated %.1f MiB, read %.1f MiB", float64(n)/(1<<20), float64(in.BytesRead())/(1<<20))
	require.EqualError(t, err, "ResourceList: larger than the limit of 16 MiB")
	require.LessOrEqual(t, in.BytesRead(), int64(16<<20+1))
	require.Less(t, n, uint64(hostile.MemoryBound))
}
