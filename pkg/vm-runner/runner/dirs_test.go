package runner

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAdoptFiles replaces the files another user wrote by copies with
// the same content and mode, and leaves its own.
func TestAdoptFiles(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tpm"), 0o750))
	state := filepath.Join(dir, "tpm", "tpm2-00.permall")
	require.NoError(t, os.WriteFile(state, []byte("tpm state"), 0o600))
	require.NoError(t, os.Symlink("tpm2-00.permall", filepath.Join(dir, "tpm", "link")))
	inode := func(p string) uint64 {
		fi, err := os.Lstat(p)
		require.NoError(t, err)
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before, link := inode(state), inode(filepath.Join(dir, "tpm", "link"))

	require.NoError(t, adoptFiles(dir, os.Getuid()))
	require.Equal(t, before, inode(state), "its own file stays")

	// As if another user had written it.
	require.NoError(t, adoptFiles(dir, os.Getuid()+1))
	require.NotEqual(t, before, inode(state), "the file was not replaced")
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	require.Equal(t, "tpm state", string(b))
	fi, err := os.Stat(state)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	require.Equal(t, link, inode(filepath.Join(dir, "tpm", "link")), "a link is no regular file")
	entries, err := os.ReadDir(filepath.Join(dir, "tpm"))
	require.NoError(t, err)
	require.Len(t, entries, 2, "a temporary file was left")
}
