package gitops

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testcluster"
)

// TestImages builds the four images (the first run on a machine builds
// the controllers: ~10 minutes) and checks what upstream's manifests
// expect of them, then that a second call reads the same images back from
// the cache.
func TestImages(t *testing.T) {
	prereq.Commands(t, "mmdebstrap", "mmdebstrap")
	prereq.Beyond(t, "the module proxy and a Debian mirror")
	root, err := testcluster.ModuleRoot()
	require.NoError(t, err)
	start := time.Now()
	b, err := Images(root)
	require.NoError(t, err)
	t.Logf("images in %s", time.Since(start).Round(time.Millisecond))

	refs := map[string]v1.Image{}
	for _, im := range b.Images {
		refs[im.Ref.String()] = im.Image
		_, err := os.Stat(im.Archive)
		require.NoError(t, err)
	}
	require.Len(t, refs, 4)

	argocd := refs[ArgoCDImage]
	require.NotNil(t, argocd, ArgoCDImage)
	cfg := config(t, argocd)
	require.Equal(t, "999:999", cfg.User)
	require.Empty(t, cfg.Entrypoint, "the pods' args run as they are")
	require.Contains(t, cfg.Env, "HOME=/home/argocd")
	files := entries(t, argocd)
	require.Equal(t, byte(tar.TypeReg), files["usr/local/bin/argocd"].Typeflag)
	for _, c := range argoCDCommands {
		require.Equal(t, "/usr/local/bin/argocd", files["usr/local/bin/"+c].Linkname, c)
	}
	// The init containers' cp (/bin is a link), the repo server's git and
	// gpg.
	require.Equal(t, "usr/bin", files["bin"].Linkname)
	for _, f := range []string{"usr/bin/cp", "usr/bin/git", "usr/bin/gpg", "usr/bin/gpg-agent", "usr/bin/dash", "etc/ssl/certs/ca-certificates.crt"} {
		require.Contains(t, files, f)
	}
	home := files["home/argocd"]
	require.Equal(t, []int{999, 999}, []int{home.Uid, home.Gid})

	redis := refs[RedisImage]
	require.NotNil(t, redis, RedisImage)
	cfg = config(t, redis)
	require.Equal(t, "999:999", cfg.User)
	require.Equal(t, []string{"/usr/bin/redis-server"}, cfg.Entrypoint)
	require.Contains(t, entries(t, redis), "usr/bin/redis-server")
	// One root layer for both: a node stores it once.
	argoLayers, err := argocd.Layers()
	require.NoError(t, err)
	redisLayers, err := redis.Layers()
	require.NoError(t, err)
	require.Len(t, redisLayers, 1)
	argoRoot, err := argoLayers[0].Digest()
	require.NoError(t, err)
	redisRoot, err := redisLayers[0].Digest()
	require.NoError(t, err)
	require.Equal(t, argoRoot, redisRoot)

	for ref, bin := range map[string]string{SourceControllerImage: "source-controller", KustomizeControllerImage: "kustomize-controller"} {
		img := refs[ref]
		require.NotNil(t, img, ref)
		cfg := config(t, img)
		require.Equal(t, "65534:65534", cfg.User)
		require.Equal(t, []string{"/usr/local/bin/" + bin}, cfg.Entrypoint)
		layers, err := img.Layers()
		require.NoError(t, err)
		require.Len(t, layers, 1, "the binary alone")
	}

	for _, f := range []string{"argocd/install.yaml", "source-controller/manager/deployment.yaml",
		"kustomize-controller/manager/deployment.yaml", "source-controller/crd/bases", "kustomize-controller/rbac/role.yaml"} {
		_, err := os.Stat(filepath.Join(b.Manifests(), f))
		require.NoError(t, err)
	}

	start = time.Now()
	again, err := Images(root)
	require.NoError(t, err)
	t.Logf("images again (from the cache) in %s", time.Since(start).Round(time.Millisecond))
	for i, im := range again.Images {
		want, err := b.Images[i].Image.Digest()
		require.NoError(t, err)
		got, err := im.Image.Digest()
		require.NoError(t, err)
		require.Equal(t, want, got, im.Ref.String())
	}
}

// TestBinariesStart runs each controller far enough to print its help:
// Argo CD's by the names its pods give it.
func TestBinariesStart(t *testing.T) {
	prereq.Beyond(t, "the module proxy")
	root, err := testcluster.ModuleRoot()
	require.NoError(t, err)
	dir, err := script(root, "build-gitops.sh")
	require.NoError(t, err)

	out, err := exec.Command(filepath.Join(dir, "argocd"), "version", "--client").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "argocd: "+ArgoCDVersion)

	links := t.TempDir()
	for _, c := range []struct{ name, flag string }{
		{"argocd-repo-server", "--parallelismlimit"},
		{"argocd-application-controller", "--status-processors"},
		{"argocd-cmp-server", "--config-dir-path"},
	} {
		link := filepath.Join(links, c.name)
		require.NoError(t, os.Symlink(filepath.Join(dir, "argocd"), link))
		out, err := exec.Command(link, "--help").CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), c.flag, c.name)
	}
	for bin, flag := range map[string]string{"source-controller": "--storage-path", "kustomize-controller": "--concurrent"} {
		out, err := exec.Command(filepath.Join(dir, bin), "--help").CombinedOutput()
		// pflag's --help exits 0 (or 2 on older versions): the flags
		// printed show that it started.
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			require.NoError(t, err)
		}
		require.Contains(t, string(out), flag, bin)
	}
}

func config(t *testing.T, img v1.Image) v1.Config {
	t.Helper()
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	return cf.Config
}

// entries are the headers of img's file system (its layers applied), by
// path.
func entries(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	m := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return m
		}
		require.NoError(t, err)
		m[h.Name] = h
	}
}
