package runnerconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/test/harness/hostile"
)

func TestHostileParse(t *testing.T) {
	want, err := Parse([]byte(javaStyle))
	require.NoError(t, err)
	crlf := strings.ReplaceAll(javaStyle, "\n", "\r\n")
	for _, c := range []struct {
		name, in string
		err      string // part of the error; none: the config is javaStyle's
	}{
		{"100k nested flow sequences", `"/Runner": {vm: {name: x, x: ` + strings.Repeat("[", 100_000) + "}}", "exceeded max depth of 10000"},
		{"100k nested block sequences", "\"/Runner\":\n  x:\n  " + strings.Repeat("- ", 100_000) + "x\n", "exceeded max depth of 10000"},
		{"billion laughs", "\"/Runner\":\n  vm:\n    name: x\n  x:\n" + hostile.Laughs("    "), "document contains excessive aliasing"},
		{"above the limit", javaStyle + strings.Repeat("#", manifest.MaxDocumentSize), "larger than the limit of 4 MiB"},
		{"invalid UTF-8", strings.Replace(javaStyle, "test-vm", "test-\xe2\x82", 1), "line 5: invalid UTF-8"},
		{"duplicate key", strings.Replace(javaStyle, "    maximumCpus: 2\n", "    maximumCpus: 2\n    maximumCpus: 64\n", 1),
			`yaml: line 9: key "maximumCpus" already set in map`},
		{"BOM", "\ufeff" + javaStyle, ""},
		{"CRLF", crlf, ""},
		{"BOM and CRLF", "\ufeff" + crlf, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var got *Config
			var err error
			n := hostile.Allocated(func() { got, err = Parse([]byte(c.in)) })
			t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
			require.Less(t, n, uint64(hostile.MemoryBound))
			if c.err == "" {
				require.NoError(t, err)
				require.Equal(t, want, got)
				return
			}
			require.ErrorContains(t, err, c.err)
			require.NotContains(t, err.Error(), "\n")
		})
	}
}

// TestHostileLoadHugeFile: a config file of 300 MB (sparse: it takes no
// disk) is refused after reading the limit.
func TestHostileLoadHugeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(hostile.HugeSize))
	require.NoError(t, f.Close())
	n := hostile.Allocated(func() { _, err = Load(path) })
	t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
	require.EqualError(t, err, path+": larger than the limit of 4 MiB")
	require.Less(t, n, uint64(hostile.MemoryBound))
}
