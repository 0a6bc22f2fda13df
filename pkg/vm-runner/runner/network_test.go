package runner

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
)

// TestCheckTapNetworks: what a tap network lacks is said before qemu
// starts, naming the network, the bridge or the file.
func TestCheckTapNetworks(t *testing.T) {
	dir := t.TempDir()
	sysClassNet = filepath.Join(dir, "net")
	bridgeHelper = filepath.Join(dir, "qemu-bridge-helper")
	bridgeConf = filepath.Join(dir, "bridge.conf")
	t.Cleanup(func() {
		sysClassNet, bridgeHelper, bridgeConf = "/sys/class/net", "/usr/lib/qemu/qemu-bridge-helper", "/etc/qemu/bridge.conf"
	})
	require.NoError(t, os.MkdirAll(filepath.Join(sysClassNet, "br0", "bridge"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(sysClassNet, "eth0"), 0o755))
	vm := &runnerconfig.VM{Network: []runnerconfig.Network{{Type: runnerconfig.NetworkUser}, {Type: runnerconfig.NetworkTap, Bridge: "br0"}}}

	require.ErrorContains(t, checkTapNetworks(vm), "network 1 (tap): the runner image has no "+bridgeHelper+", which tap networks need")
	require.NoError(t, os.WriteFile(bridgeHelper, nil, 0o755))
	require.ErrorContains(t, checkTapNetworks(vm), "network 1 (tap): the runner image has no "+bridgeConf)
	require.NoError(t, os.WriteFile(bridgeConf, []byte("allow all\n"), 0o644))
	require.NoError(t, checkTapNetworks(vm))

	for _, br := range []string{"br1", "eth0"} { // absent; no bridge
		vm.Network[1].Bridge = br
		require.ErrorContains(t, checkTapNetworks(vm), `network 1 (tap): bridge "`+br+`" does not exist on node `)
	}
	require.NoError(t, checkTapNetworks(&runnerconfig.VM{Network: []runnerconfig.Network{{Type: runnerconfig.NetworkUser}}}))
}

// TestPodNetworkOutsidePod: a stand-alone runner never rewrites its host's
// network for a pod network; it says so and ends with the network's code.
func TestPodNetworkOutsidePod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, []byte(`"/Runner":
  dataDir: `+dir+`/data
  runtimeDir: `+dir+`/run
  vm: {name: pod-net, firmware: bios, network: [{type: pod}]}
`), 0o644))
	r, err := New(Options{ConfigFile: config, Qemu: "/bin/false"})
	require.NoError(t, err)
	err = r.Run(t.Context())
	var exit *ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, runnerconfig.ExitNetwork, exit.Code)
	require.ErrorIs(t, err, errNotInPod)
}
