package runnerdata_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/runnerdata"
)

// TestArchiveExtract: the data directory comes back as it was, and files
// the archive does not have go.
func TestArchiveExtract(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"uuid.txt": "1234\n", "fw-vars.fd": "vars", "tpm/tpm2-00.permall": "state", "imports/root-disk": "{}"}
	for name, content := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(src, name), []byte(content), 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(src, "lost+found"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(src, "lost+found", "x"), nil, 0o600))
	var b bytes.Buffer
	require.NoError(t, runnerdata.Archive(src, &b))

	dst := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dst, "tpm"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dst, "tpm", "tpm2-00.volatilestate"), []byte("newer"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dst, "uuid.txt"), []byte("other\n"), 0o600))
	require.NoError(t, runnerdata.Extract(bytes.NewReader(b.Bytes()), dst))
	for name, content := range files {
		got, err := os.ReadFile(filepath.Join(dst, name))
		require.NoError(t, err)
		require.Equal(t, content, string(got), name)
	}
	require.NoFileExists(t, filepath.Join(dst, "tpm", "tpm2-00.volatilestate"))
	require.NoDirExists(t, filepath.Join(dst, "lost+found"))
}

// TestExtractRefuses: an archive whose names leave the directory, or
// that is not one, changes nothing.
func TestExtractRefuses(t *testing.T) {
	for name, hdr := range map[string]tar.Header{
		"parent":   {Name: "../evil", Size: 1, Mode: 0o600, Typeflag: tar.TypeReg},
		"absolute": {Name: "/etc/evil", Size: 1, Mode: 0o600, Typeflag: tar.TypeReg},
		"link":     {Name: "uuid.txt", Linkname: "/etc/passwd", Typeflag: tar.TypeSymlink},
	} {
		t.Run(name, func(t *testing.T) {
			var b bytes.Buffer
			gz := gzip.NewWriter(&b)
			tw := tar.NewWriter(gz)
			require.NoError(t, tw.WriteHeader(&hdr))
			if hdr.Size > 0 {
				_, _ = tw.Write([]byte("x"))
			}
			require.NoError(t, tw.Close())
			require.NoError(t, gz.Close())
			dst := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dst, "uuid.txt"), []byte("kept"), 0o600))
			require.ErrorContains(t, runnerdata.Extract(&b, dst), "is not a file under the data directory")
			got, err := os.ReadFile(filepath.Join(dst, "uuid.txt"))
			require.NoError(t, err)
			require.Equal(t, "kept", string(got))
		})
	}
	require.ErrorContains(t, runnerdata.Extract(bytes.NewReader([]byte("not gzip")), t.TempDir()), "the runner data archive")
}
