package imagebuild

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/version"
)

// TestNodeImage: vm-node is built like the operator (one static binary,
// no base layer) but runs as root, the privileged node agent.
func TestNodeImage(t *testing.T) {
	var im *image
	for i := range images {
		if images[i].name == version.NodeImage {
			im = &images[i]
		}
	}
	require.NotNil(t, im, "an image %s", version.NodeImage)
	require.Equal(t, "./cmd/vm-node", im.pkg)
	require.Equal(t, "vm-node", im.at)
	require.Equal(t, "0:0", im.user)
	require.Nil(t, im.base)
	require.Empty(t, im.dirs)
	if testing.Short() {
		return // the build below takes a Go build of the agent
	}

	mod, err := exec.Command("go", "env", "GOMOD").Output()
	require.NoError(t, err)
	o := Options{
		Module:  filepath.Dir(strings.TrimSpace(string(mod))),
		Version: "v1.2.3",
		Created: time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC),
		Out:     t.TempDir(),
	}
	b, err := im.build(o, t.TempDir())
	require.NoError(t, err)
	require.Equal(t, "ghcr.io/vmop/vm-node:v1.2.3", b.Ref.String())
	require.Equal(t, filepath.Join(o.Out, "vm-node.tar"), b.Archive)
	cfg, err := b.Image.ConfigFile()
	require.NoError(t, err)
	require.Equal(t, "0:0", cfg.Config.User)
	require.Equal(t, []string{"/vm-node"}, cfg.Config.Entrypoint)
	require.Equal(t, "vm-node: vmop's node agent: devices and pod networks for unprivileged VM pods",
		cfg.Config.Labels["org.opencontainers.image.description"])
	layers, err := b.Image.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1, "the binary only, no base layer")
}
