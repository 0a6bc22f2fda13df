package imagebuild

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDirLayer: entries in name order, times clamped to the epoch, hard
// links kept as links, nothing below dev/, and the same digest for the
// same tree however its files were made.
func TestDirLayer(t *testing.T) {
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tree := func() string {
		root := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755))
		require.NoError(t, os.MkdirAll(filepath.Join(root, "dev"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "dev", "null"), nil, 0o666))
		require.NoError(t, os.WriteFile(filepath.Join(root, "usr", "bin", "b"), []byte("b"), 0o755))
		require.NoError(t, os.Link(filepath.Join(root, "usr", "bin", "b"), filepath.Join(root, "usr", "bin", "a")))
		require.NoError(t, os.Symlink("usr/bin", filepath.Join(root, "bin")))
		old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
		require.NoError(t, os.Chtimes(filepath.Join(root, "usr", "bin", "b"), old, old))
		return root
	}
	l1, err := DirLayer(t.TempDir(), tree(), epoch)
	require.NoError(t, err)
	l2, err := DirLayer(t.TempDir(), tree(), epoch)
	require.NoError(t, err)
	d1, err := l1.Digest()
	require.NoError(t, err)
	d2, err := l2.Digest()
	require.NoError(t, err)
	require.Equal(t, d1, d2)

	rc, err := l1.Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var got []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got = append(got, h.Name)
		require.False(t, h.ModTime.After(epoch), "%s: %s is after the epoch", h.Name, h.ModTime)
		switch h.Name {
		case "usr/bin/a":
			require.Equal(t, byte(tar.TypeReg), h.Typeflag)
		case "usr/bin/b":
			require.Equal(t, byte(tar.TypeLink), h.Typeflag, "the second name of the inode")
			require.Equal(t, "usr/bin/a", h.Linkname)
		case "bin":
			require.Equal(t, "usr/bin", h.Linkname)
		}
	}
	require.Equal(t, []string{"bin", "dev/", "usr/", "usr/bin/", "usr/bin/a", "usr/bin/b"}, got)
}
