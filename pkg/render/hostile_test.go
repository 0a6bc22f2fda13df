package render_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/hostile"
)

// hostileVM is a VM with a cloud-init user data block for the bombs, a
// literal block scalar and comments.
const hostileVM = `# a comment
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: test-vm
  namespace: vmop-demo
spec:
  cloudInit:
    userData:
      runcmd:
      - |
        echo one
        echo two
  vm:
    maximumCpus: 4
    currentCpus: 2
    maximumRam: 4Gi
`

// hostileConfigMap is passed through, comments and all.
const hostileConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: scripts # kept
data:
  run.sh: |
    #!/bin/sh
    exit 0
`

const hostileStream = hostileVM + "---\n" + hostileConfigMap

func TestHostileStream(t *testing.T) {
	userData := "    userData:\n      runcmd:\n"
	for _, c := range []struct {
		name, in string
		want     []string // the problems
	}{
		{"100k nested sequences in user data",
			strings.Replace(hostileStream, userData, "    userData: {a: "+strings.Repeat("[", 100_000)+"}\n", 1),
			[]string{"input.yaml: document 1: yaml: line 9: exceeded max depth of 10000"}},
		{"100k nested block sequences in user data",
			strings.Replace(hostileStream, userData, "    userData:\n      a:\n      "+strings.Repeat("- ", 100_000)+"x\n      runcmd:\n", 1),
			[]string{"input.yaml: document 1: yaml: line 11: exceeded max depth of 10000"}},
		{"billion laughs in user data",
			strings.Replace(hostileStream, userData, "    userData:\n"+hostile.Laughs("      ")+"      runcmd:\n", 1),
			[]string{"input.yaml: document 1: yaml: document contains excessive aliasing"}},
		{"duplicate key in the VM",
			strings.Replace(hostileStream, "    maximumCpus: 4\n", "    maximumCpus: 4\n    maximumCpus: 8\n", 1),
			[]string{`input.yaml: document 1: yaml: line 16: key "maximumCpus" already set in map`}},
		{"duplicate key in a document passed through",
			strings.Replace(hostileStream, "  name: scripts # kept\n", "  name: scripts # kept\n  name: other\n", 1),
			[]string{`input.yaml: document 2: yaml: line 5: key "name" already set in map`}},
		{"invalid UTF-8 in the VM",
			strings.Replace(hostileStream, "echo two", "echo \xc0\xaf", 1),
			[]string{"input.yaml: document 1: line 13: invalid UTF-8"}},
		{"invalid UTF-8 in a comment",
			strings.Replace(hostileStream, "# kept", "# \xff", 1),
			[]string{"input.yaml: document 2: line 4: invalid UTF-8"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var res streamResult
			n := hostile.Allocated(func() { res = renderBytes(t, []byte(c.in), manifest.FormatYAML, render.StreamOptions{}) })
			t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
			require.Equal(t, c.want, res.problems)
			require.Less(t, n, uint64(hostile.MemoryBound))
		})
	}
}

// TestHostileStreamEncodings: a BOM and CRLF line breaks (a manifest
// edited on Windows) give the same output as the plain LF file.
func TestHostileStreamEncodings(t *testing.T) {
	example, err := os.ReadFile("../../examples/local-path-test-vm.yaml")
	require.NoError(t, err)
	lf := hostileStream + "---\n" + string(example)
	crlf := strings.ReplaceAll(lf, "\n", "\r\n")
	for _, format := range manifest.Formats {
		want := renderBytes(t, []byte(lf), format, render.StreamOptions{})
		require.Empty(t, want.problems)
		for name, in := range map[string]string{"BOM": "\ufeff" + lf, "CRLF": crlf, "BOM and CRLF": "\ufeff" + crlf} {
			t.Run(format+"/"+name, func(t *testing.T) {
				got := renderBytes(t, []byte(in), format, render.StreamOptions{})
				require.Empty(t, got.problems)
				require.Equal(t, string(want.out), string(got.out))
			})
		}
	}
}

func TestHostileStreamUTF16(t *testing.T) {
	w, err := manifest.NewWriter(&bytes.Buffer{}, manifest.FormatYAML)
	require.NoError(t, err)
	_, err = render.Stream(strings.NewReader("\xff\xfea\x00:\x00"), "win.yaml", w, render.StreamOptions{})
	require.EqualError(t, err, "win.yaml: UTF-16 is not supported: save the input as UTF-8")
}

// TestHostileStreamHugeDocument: a document of 300 MB after a good one is
// refused without being read, and the good one is not written.
func TestHostileStreamHugeDocument(t *testing.T) {
	in := hostile.NewDocument(hostileVM+"---\n", "# more\n", hostile.HugeSize)
	var out bytes.Buffer
	w, err := manifest.NewWriter(&out, manifest.FormatYAML)
	require.NoError(t, err)
	var problems []render.Problem
	n := hostile.Allocated(func() { problems, err = render.Stream(in, "-", w, render.StreamOptions{}) })
	t.Logf("allocated %.1f MiB, read %.1f MiB", float64(n)/(1<<20), float64(in.BytesRead())/(1<<20))
	require.NoError(t, err)
	require.Len(t, problems, 1)
	require.Equal(t, "-: document 2: larger than the limit of 4 MiB; the input after it is not read", problems[0].String())
	require.Less(t, in.BytesRead(), int64(2*manifest.MaxDocumentSize))
	require.Less(t, n, uint64(hostile.MemoryBound))
}
