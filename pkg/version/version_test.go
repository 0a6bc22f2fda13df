package version_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/version"
)

func TestImage(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	for _, c := range []struct{ version, registry, want string }{
		{"v1.2.3", "", "ghcr.io/vmop/vm-runner:v1.2.3"},
		{"v1.2.3", "registry.example:5000/mirror/", "registry.example:5000/mirror/vm-runner:v1.2.3"},
		{"v0.0.0-20261123-abcdef+dirty", "", "ghcr.io/vmop/vm-runner:v0.0.0-20261123-abcdef-dirty"},
		{"ebb3edd-dirty", "localhost:5000", "localhost:5000/vm-runner:ebb3edd-dirty"},
	} {
		version.Version = c.version
		require.Equal(t, c.want, version.Image(c.registry, version.RunnerImage), c.version)
	}
}

func TestRepository(t *testing.T) {
	require.Equal(t, "ghcr.io/vmop/vm-runner", version.Repository("", version.RunnerImage))
	require.Equal(t, "registry.example:5000/mirror/vm-node", version.Repository("registry.example:5000/mirror/", version.NodeImage))
}

func TestValidateRegistry(t *testing.T) {
	for _, ok := range []string{"ghcr.io/vmop", "registry.example:5000/mirror/vmop", "localhost:5000", "127.0.0.1:5000/vmop/"} {
		require.NoError(t, version.ValidateRegistry(ok), ok)
	}
	for _, bad := range []string{"", "https://ghcr.io/vmop", "ghcr.io/VMOP", "ghcr.io/vmop:v1", "ghcr.io/vm op"} {
		require.ErrorContains(t, version.ValidateRegistry(bad), "is not a registry", bad)
	}
}
