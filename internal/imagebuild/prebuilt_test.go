package imagebuild

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/require"
)

// TestPrebuilt: a binary from elsewhere on a root of its own, with links
// to it and no entrypoint, as the tests' Argo CD image is made.
func TestPrebuilt(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tool")
	require.NoError(t, os.WriteFile(bin, []byte("#!binary"), 0o700))
	root := filepath.Join(dir, "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:*:0:0::/root:/bin/sh\n"), 0o644))

	o := Options{Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Out: filepath.Join(dir, "out")}
	b, err := Prebuilt(o, PrebuiltImage{
		Name: "tool", Ref: "vmop.test/tool:v1", Binary: bin, At: "usr/local/bin/tool", Root: root,
		Symlinks: map[string]string{"usr/local/bin/tool-server": "/usr/local/bin/tool"},
		Env:      []string{"HOME=/home/tool"}, User: "999:999", WorkingDir: "/home/tool",
	})
	require.NoError(t, err)
	require.Equal(t, "vmop.test/tool:v1", b.Ref.String())
	require.Equal(t, filepath.Join(o.Out, "tool.tar"), b.Archive)

	cf, err := b.Image.ConfigFile()
	require.NoError(t, err)
	require.Empty(t, cf.Config.Entrypoint)
	require.Equal(t, []string{debianPath, "HOME=/home/tool"}, cf.Config.Env)
	require.Equal(t, "999:999", cf.Config.User)
	require.Equal(t, "/home/tool", cf.Config.WorkingDir)
	require.Equal(t, "v1", cf.Config.Labels["org.opencontainers.image.version"])
	layers, err := b.Image.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 2, "the root, then the binary and its links")

	read, err := ReadArchive(b.Archive, b.Ref)
	require.NoError(t, err)
	got := map[string]*tar.Header{}
	rc := mutate.Extract(read)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		got[h.Name] = h
		if h.Name == "usr/local/bin/tool" {
			data, err := io.ReadAll(tr)
			require.NoError(t, err)
			require.Equal(t, "#!binary", string(data))
		}
	}
	require.Contains(t, got, "etc/passwd")
	require.Equal(t, int64(0o755), got["usr/local/bin/tool"].Mode)
	require.Equal(t, "/usr/local/bin/tool", got["usr/local/bin/tool-server"].Linkname)
}
