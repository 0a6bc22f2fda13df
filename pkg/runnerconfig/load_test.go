package runnerconfig

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/hostile"
)

// javaStyle is written the way VM-Operator's runner documents its config.
const javaStyle = `
"/Runner":
  guestShutdownStops: true
  vm:
    name: test-vm
    maximumRam: "4 GiB"
    currentRam: 2G
    maximumCpus: 2
    currentCpus: 3
    network:
    - type: tap
    drives:
    - type: raw
      resource: /dev/system-disk
    - type: ide-cd
      file: ""
      bootindex: 0
    display:
      spice:
        usbRedirects: 1
`

func TestParseJavaStyle(t *testing.T) {
	c, err := Parse([]byte(javaStyle))
	require.NoError(t, err)
	v := c.VM
	require.Equal(t, int64(4<<30), v.MaximumRAM.Bytes)
	require.Equal(t, int64(2e9), v.CurrentRAM.Bytes)
	require.Equal(t, int32(3), v.MaximumCPUs, "a larger current count raises the maximum")
	require.Equal(t, "br0", v.Network[0].Bridge)
	require.Equal(t, "virtio-net", v.Network[0].Device)
	require.Equal(t, int32(DefaultSpicePort), v.Display.Spice.Port)
	require.Equal(t, int64(DefaultPowerdownTimeout), *v.PowerdownTimeout)
	require.True(t, c.GuestShutdownStops)
}

func TestParseSizes(t *testing.T) {
	for in, want := range map[string]int64{
		"4Gi": 4 << 30, "4 GiB": 4 << 30, "1G": 1e9, "512 MB": 512e6, "512MiB": 512 << 20, "2048": 2048, "4 KiB": 4096, "4 KB": 4000,
	} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "4 GX", "x", "4 B B"} {
		_, err := ParseSize(in)
		require.Error(t, err, in)
	}
}

func TestParseErrorsNameFields(t *testing.T) {
	_, err := Parse([]byte(`"/Runner": {vm: {firmware: efi, maximumRam: 1Gi, currentRam: 2Gi, powerdownTimeout: -1, drives: [{type: floppy}]}}`))
	require.Error(t, err)
	for _, want := range []string{
		"/Runner.vm.name: Required value",
		`/Runner.vm.firmware: Unsupported value: "efi"`,
		"/Runner.vm.currentRam: Invalid value: 2147483648",
		"/Runner.vm.powerdownTimeout: Invalid value: -1",
		`/Runner.vm.drives[0].type: Unsupported value: "floppy"`,
	} {
		require.Contains(t, err.Error(), want)
	}
}

func TestLoadNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`"/Runner": {vm: {name: x, maximumRam: "4 GX"}}`), 0o644))
	_, err := Load(path)
	require.ErrorContains(t, err, path+": ")
	require.ErrorContains(t, err, `/Runner.vm.maximumRam: Invalid value: "4 GX": must be a size`)
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(javaStyle))
	f.Add([]byte(`"/Runner": {vm: {name: x, sockets: 2147483647, coresPerDie: 2147483647, threadsPerCore: 2}}`))
	// Hostile input: a BOM and CRLF, a duplicate key, invalid UTF-8, a
	// billion laughs and nesting beyond yaml.v2's limit.
	f.Add([]byte("\ufeff" + strings.ReplaceAll(javaStyle, "\n", "\r\n")))
	f.Add([]byte(`"/Runner": {vm: {name: x, name: y}}`))
	f.Add([]byte("\"/Runner\": {vm: {name: \"x\xff\"}}"))
	f.Add([]byte("\"/Runner\":\n  vm:\n    name: x\n  x:\n" + hostile.Laughs("    ")))
	f.Add([]byte(`"/Runner": {vm: {name: x, x: ` + strings.Repeat("[", 10_001) + "}}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := Parse(in)
		if err != nil {
			require.NotEmpty(t, strings.TrimSpace(err.Error()))
			return
		}
		require.Empty(t, c.Validate())
	})
}
