package runner

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/runnerdata"
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

// TestWriteFileFull: a write cut off (a full volume) leaves the file as it
// was, and no temporary file; the error names the data volume and what to
// do.
func TestWriteFileFull(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "uuid.txt")
	require.NoError(t, os.WriteFile(path, []byte("old\n"), 0o644))
	err := runnerdata.WriteFile(path, 0o644, func(w io.Writer) error {
		_, _ = io.WriteString(w, "ne")
		return &fs.PathError{Op: "write", Path: path + ".tmp", Err: syscall.ENOSPC}
	})
	require.ErrorIs(t, err, syscall.ENOSPC)
	require.Contains(t, dataFull(dir, err).Error(), "no space left on device: the VM's data volume ("+dir+") is full; free room on it or grow its claim")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "old\n", string(b))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "a temporary file is left")

	require.NoError(t, runnerdata.WriteFile(path, 0o600, func(w io.Writer) error {
		_, err := io.WriteString(w, "new\n")
		return err
	}))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "new\n", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o600), fi.Mode().Perm())
}
