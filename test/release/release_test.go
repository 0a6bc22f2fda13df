// Package release tests vmop's release as .github/workflows/release.yml
// makes it on a tag, and with it a newcomer's way from a clone to images
// that a cluster pulls (docs/getting-started.md): the workflow's own
// release step, run as a dry run against a registry of the test's own on
// 127.0.0.1, pushes the images (make push-images) and builds the krew
// release (make krew); the released plugin's install and render then name
// exactly the images that were pushed.
package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/test/harness/krewdist"
	"github.com/vmop/vmop/test/harness/prereq"
)

// testVersion is the tag the dry run releases: a semantic version, as krew
// requires, that is also an image tag as it is.
const testVersion = "v0.0.0-test"

// images are what a release pushes.
var images = []string{version.RunnerImage, version.OperatorImage, version.NodeImage, version.FunctionImage}

// workflow is what the test reads of release.yml.
type workflow struct {
	On struct {
		Push struct{ Tags []string }
	}
	Permissions map[string]string
	Jobs        map[string]struct {
		Steps []struct {
			Name string
			Run  string
			Env  map[string]string
		}
	}
}

// TestReleaseDryRun runs the release step of release.yml, the command a
// tag runs, with DRY_RUN=1 and REGISTRY on 127.0.0.1 instead of
// ghcr.io/vmop: the registry then holds each image for linux/amd64 under
// the release's tag, the very image that make push-images built; the krew
// manifest names the release's version and its archive's sha256; the
// GitHub release it would make attaches them. The plugin of that release
// installs and renders with --image-registry, as getting-started.md has a
// newcomer do, and names only images the registry holds. Only this
// machine's krew archive is built (KREW_PLATFORMS; the workflow builds
// all four): each other one is a cross-build of the plugin, 12 minutes
// for darwin/arm64 with a cold cache on 2 busy cores.
func TestReleaseDryRun(t *testing.T) {
	prereq.Commands(t, "make", "make")
	prereq.Commands(t, "git", "git")
	prereq.Commands(t, "mmdebstrap", "mmdebstrap") // the runner image's root
	root, err := filepath.Abs("../..")
	require.NoError(t, err)

	step := releaseStep(t, root)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	reg := strings.TrimPrefix(srv.URL, "http://") + "/vmop"
	dist := t.TempDir()

	// As GitHub runs a step's script, with the tag's name in
	// GITHUB_REF_NAME; this REGISTRY replaces the step's ghcr.io/vmop.
	cmd := exec.Command("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GITHUB_REF_NAME="+testVersion, "REGISTRY="+reg, "DRY_RUN=1", "DIST="+dist,
		"KREW_PLATFORMS="+runtime.GOOS+"/"+runtime.GOARCH)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Logf("release dry run, %s:\n%s", time.Since(start).Round(time.Second), out)

	tag := version.Tag(testVersion)
	var repos []string
	for _, n := range images {
		ref, err := name.NewTag(version.Ref(reg, n, tag))
		require.NoError(t, err)
		require.Contains(t, string(out), "pushed "+ref.String()+"\n")
		pushed, err := remote.Image(ref)
		require.NoError(t, err, "%s in the registry", ref)
		cf, err := pushed.ConfigFile()
		require.NoError(t, err)
		require.Equal(t, "linux/amd64", cf.OS+"/"+cf.Architecture, ref.String())
		require.Equal(t, tag, cf.Config.Labels["org.opencontainers.image.version"], ref.String())
		// make push-images prints the digest of each image it built, which
		// it names for ghcr.io/vmop.
		digest, err := pushed.Digest()
		require.NoError(t, err)
		require.Regexp(t, `(?m)^`+regexp.QuoteMeta(version.Ref("", n, tag))+` +`+digest.String()+` `, string(out), "%s is what make push-images built", ref)
		repos = append(repos, ref.RepositoryStr())
	}
	host, err := name.NewRegistry(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	catalog, err := remote.Catalog(t.Context(), host)
	require.NoError(t, err)
	require.ElementsMatch(t, repos, catalog, "the registry holds the four images, nothing else")

	assets := krewdist.Check(t, dist, testVersion)
	require.Contains(t, string(out), "dry run, not run: gh release create "+testVersion+` --verify-tag --title vmop\ `+testVersion+" --generate-notes "+strings.Join(assets, " ")+"\n")

	plugin := unpackPlugin(t, dist)
	v, err := exec.Command(plugin, "version", "--client").CombinedOutput()
	require.NoError(t, err, "%s", v)
	require.True(t, strings.HasPrefix(string(v), "kubectl-vm "+testVersion+"\n"), "%s", v)

	installed, err := exec.Command(plugin, "install", "--dry-run", "-o", "yaml", "--image-registry", reg).CombinedOutput()
	require.NoError(t, err, "%s", installed)
	require.ElementsMatch(t, []string{version.Ref(reg, version.OperatorImage, tag), version.Ref(reg, version.NodeImage, tag)}, imageRefs(t, installed))
	// The operator renders the runner of its own version from there, and
	// the node agent serves pods of that runner.
	require.Contains(t, string(installed), "--image-registry="+reg+"\n")
	require.Contains(t, string(installed), "--runner-repository="+version.Repository(reg, version.RunnerImage)+"\n")

	rendered, err := exec.Command(plugin, "render", "--image-registry", reg, "-f", filepath.Join(root, "examples", "local-path-test-vm.yaml")).CombinedOutput()
	require.NoError(t, err, "%s", rendered)
	require.Equal(t, []string{version.Ref(reg, version.RunnerImage, tag)}, slices.Compact(imageRefs(t, rendered)))
}

// releaseStep is the script of release.yml's one step that runs make
// release, after checking what the workflow publishes and when.
func releaseStep(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".github", "workflows", "release.yml"))
	require.NoError(t, err)
	var w workflow
	require.NoError(t, yaml.Unmarshal(b, &w))
	require.Equal(t, []string{"v*"}, w.On.Push.Tags)
	require.Equal(t, map[string]string{"contents": "write", "packages": "write"}, w.Permissions)
	var runs []string
	for _, j := range w.Jobs {
		for _, s := range j.Steps {
			if strings.Contains(s.Run, "make release") {
				require.Equal(t, version.Registry, s.Env["REGISTRY"], "the step publishes to ghcr.io/vmop")
				require.NotContains(t, s.Run, "KREW_PLATFORMS", "the release builds every platform")
				require.NotContains(t, s.Env, "KREW_PLATFORMS", "the release builds every platform")
				runs = append(runs, s.Run)
			}
		}
	}
	require.Len(t, runs, 1, "one step of release.yml runs make release")
	return runs[0]
}

// unpackPlugin returns kubectl-vm of this machine's platform from the
// release's archive.
func unpackPlugin(t *testing.T, dist string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(dist, "kubectl-vm_"+runtime.GOOS+"_"+runtime.GOARCH+".tar.gz"))
	require.NoError(t, err)
	defer f.Close()
	z, err := gzip.NewReader(f)
	require.NoError(t, err)
	tr := tar.NewReader(z)
	for {
		h, err := tr.Next()
		require.NoError(t, err, "kubectl-vm in the archive")
		if h.Name != "kubectl-vm" {
			continue
		}
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		plugin := filepath.Join(t.TempDir(), "kubectl-vm")
		require.NoError(t, os.WriteFile(plugin, b, 0o755))
		return plugin
	}
}

// imageRefs are the images of every container of the objects in stream.
func imageRefs(t *testing.T, stream []byte) []string {
	t.Helper()
	var refs []string
	r := manifest.NewReader(bytes.NewReader(stream))
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return refs
		}
		require.NoError(t, err)
		var obj map[string]any
		require.NoError(t, json.Unmarshal(d.JSON, &obj))
		refs = append(refs, containerImages(obj)...)
	}
}

// containerImages walks v for the string values of "image" keys: a
// container's (the CRD's schema has objects there).
func containerImages(v any) []string {
	var refs []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "image" {
				refs = append(refs, s)
			} else {
				refs = append(refs, containerImages(x)...)
			}
		}
	case []any:
		for _, x := range v {
			refs = append(refs, containerImages(x)...)
		}
	}
	return refs
}
