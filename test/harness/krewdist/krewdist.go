// Package krewdist checks what make krew writes (the krew manifest vm.yaml
// and the archives it names) for the krew test and the release's dry run.
package krewdist

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// manifest is what Check reads of a krew plugin manifest; krew's own
// validation runs when krew installs it.
type manifest struct {
	Metadata struct{ Name string }
	Spec     struct {
		Version   string
		Platforms []struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			}
			URI    string
			Sha256 string
			Bin    string
			Files  []struct{ From, To string }
		}
	}
}

// Check checks dist/vm.yaml, made for version and this machine's platform
// only (KREW_PLATFORMS): its name, version, the archive's release URL and
// sha256, its binary and license. It returns the manifest's path and the
// archive's, as a release attaches them.
func Check(t testing.TB, dist, version string) []string {
	t.Helper()
	file := filepath.Join(dist, "vm.yaml")
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	var m manifest
	require.NoError(t, yaml.Unmarshal(data, &m))
	require.Equal(t, "vm", m.Metadata.Name)
	require.Equal(t, version, m.Spec.Version)
	assets := []string{file}
	var platforms []string
	for _, p := range m.Spec.Platforms {
		platform := p.Selector.MatchLabels["os"] + "_" + p.Selector.MatchLabels["arch"]
		platforms = append(platforms, platform)
		archive := "kubectl-vm_" + platform + ".tar.gz"
		require.Equal(t, "https://github.com/vmop/vmop/releases/download/"+version+"/"+archive, p.URI)
		b, err := os.ReadFile(filepath.Join(dist, archive))
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		require.Equal(t, hex.EncodeToString(sum[:]), p.Sha256, archive)
		require.Equal(t, "kubectl-vm", p.Bin)
		// krew-index asks every plugin to install its license.
		require.Contains(t, p.Files, struct{ From, To string }{"LICENSE", "."}, archive)
		assets = append(assets, filepath.Join(dist, archive))
	}
	require.Equal(t, []string{runtime.GOOS + "_" + runtime.GOARCH}, platforms)
	return assets
}
