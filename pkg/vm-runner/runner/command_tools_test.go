package runner

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// exampleConfigs renders the VMs of examples/ and returns their runner
// configs, as the pods would read them.
func exampleConfigs(t *testing.T) map[string]*runnerconfig.Config {
	t.Helper()
	files, err := filepath.Glob("../../../examples/*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, files, "no examples found")
	configs := map[string]*runnerconfig.Config{}
	for _, f := range files {
		in, err := os.ReadFile(f)
		require.NoError(t, err)
		r := manifest.NewReader(bytes.NewReader(in))
		for {
			d, err := r.Next()
			if d == nil {
				break
			}
			require.NoError(t, err)
			if !v1.IsVirtualMachine(d.APIVersion, d.Kind) {
				continue
			}
			objs, problems, _ := render.FromJSON(d.JSON, render.StreamOptions{})
			require.Empty(t, problems)
			c, err := runnerconfig.Parse([]byte(objs.ConfigMap.Data[vmpod.ConfigFile]))
			require.NoError(t, err)
			name := strings.TrimSuffix(filepath.Base(f), ".yaml")
			configs[name] = c
		}
	}
	require.NotEmpty(t, configs)
	return configs
}

// TestCommandGolden pins the qemu command of every example VM, for a host
// with KVM and Debian's firmware, as vm-runner-template makes it from the
// machine the runner sends.
func TestCommandGolden(t *testing.T) {
	helper := vmopbin.Build(t, TemplateHelper)
	for name, c := range exampleConfigs(t) {
		t.Run(name, func(t *testing.T) {
			fw := Firmware{}
			if c.VM.Firmware != "bios" {
				fw = Firmware{Code: "/usr/share/OVMF/OVMF_CODE.fd", Vars: "/var/local/vm-data/fw-vars.fd"}
				fw.Secure = strings.HasPrefix(c.VM.Firmware, "secure")
				fw.SMM = fw.Secure
			}
			m := NewMachine(&c.VM, "00000000-0000-4000-8000-000000000001", true, fw, "/run/vmrunner/"+c.VM.Name,
				func(p string) bool { return strings.HasPrefix(p, "/dev/") })
			if c.VM.UseTPM {
				m.TPMSocket = "/run/vmrunner/" + c.VM.Name + "/swtpm.sock"
			}
			m.CloudInitISO = "/run/vmrunner/" + c.VM.Name + "/cloud-init.iso"
			m.Ticketing = true
			args, err := ExpandTemplate(t.Context(), helper, "", nil, m)
			require.NoError(t, err)
			got := strings.Join(args, "\n") + "\n"
			golden := filepath.Join("testdata", "command", name+".txt")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(golden), 0o755))
				require.NoError(t, os.WriteFile(golden, []byte(got), 0o644))
			}
			want, err := os.ReadFile(golden)
			require.NoError(t, err, "run with -update to create it")
			if d := cmp.Diff(string(want), got); d != "" {
				t.Errorf("qemu command of %s (-want +got, -update to accept):\n%s", name, d)
			}
		})
	}
}

// TestFirmwareKinds: every firmware a config may name has its files.
func TestFirmwareKinds(t *testing.T) {
	for _, kind := range runnerconfig.Firmwares {
		if _, ok := firmwareFiles[kind]; !ok && kind != "bios" {
			t.Errorf("no firmware files for %q", kind)
		}
	}
	require.Len(t, firmwareFiles, len(runnerconfig.Firmwares)-1)
}

// TestFirmwareVarsOfAnotherBuild: variables kept from a firmware build of
// another size (another runner image) are refused with what to do, rather
// than handed to qemu; matching ones are kept as they are.
func TestFirmwareVarsOfAnotherBuild(t *testing.T) {
	var fw flash
	var err error
	prereq.Installed(t, "OVMF (Debian: ovmf)", func() error {
		fw, err = firstBuild(firmwareFiles["uefi-4m"])
		return err
	})
	dir := t.TempDir()
	vars := filepath.Join(dir, "fw-vars.fd")
	require.NoError(t, os.WriteFile(vars, make([]byte, 128<<10), 0o600))
	_, err = FindFirmware("uefi-4m", dir)
	require.ErrorContains(t, err, "do not fit "+fw.code)
	require.ErrorContains(t, err, "delete them to start with fresh variables")

	require.NoError(t, os.Remove(vars))
	got, err := FindFirmware("uefi-4m", dir)
	require.NoError(t, err)
	require.Equal(t, fw.code, got.Code)
	got, err = FindFirmware("uefi-4m", dir)
	require.NoError(t, err, "the VM's own copy is kept")
	require.Equal(t, vars, got.Vars)
}

// TestPodNetworkCommand: a pod network's NIC is the tap the runner made,
// with the MAC its DHCP server answers.
func TestPodNetworkCommand(t *testing.T) {
	helper := vmopbin.Build(t, TemplateHelper)
	c, err := runnerconfig.Parse([]byte(`"/Runner":
  vm:
    name: server
    network:
    - type: pod
    - type: user
`))
	require.NoError(t, err)
	args, err := ExpandTemplate(t.Context(), helper, "", nil, NewMachine(&c.VM, "00000000-0000-4000-8000-000000000001", false, Firmware{}, "/run/vmrunner/server",
		func(string) bool { return false }))
	require.NoError(t, err)
	cmd := strings.Join(args, " ")
	require.Contains(t, cmd, "-netdev tap,id=net0,ifname=vmtap0,script=no,downscript=no -device virtio-net,netdev=net0,mac=52:54:00:70:6f:64 ")
	require.True(t, strings.HasSuffix(cmd, "-netdev user,id=net1 -device virtio-net,netdev=net1"), cmd)
}

// TestDisksKeepWhatTheGuestFlushed: every disk of every example honours
// the guest's flushes (no cache.no-flush, the cache mode "unsafe") and
// pauses the guest on an I/O error (a full volume) rather than failing
// its writes: what the guest fsynced survives a crash of the node, and a
// full volume loses nothing (docs/operator.md).
func TestDisksKeepWhatTheGuestFlushed(t *testing.T) {
	helper := vmopbin.Build(t, TemplateHelper)
	for name, c := range exampleConfigs(t) {
		m := NewMachine(&c.VM, "00000000-0000-4000-8000-000000000001", true, Firmware{}, "/run/vmrunner",
			func(p string) bool { return strings.HasPrefix(p, "/dev/") })
		args, err := ExpandTemplate(t.Context(), helper, "", nil, m)
		require.NoError(t, err)
		disks := 0
		for _, a := range args {
			require.NotContains(t, a, "no-flush", "%s: %s", name, a)
			require.NotContains(t, a, "unsafe", "%s: %s", name, a)
			if strings.HasPrefix(a, "virtio-blk-pci,drive=disk") {
				disks++
				require.Contains(t, a, ",werror=stop,rerror=stop", "%s: %s", name, a)
			}
		}
		require.Len(t, m.Disks, disks, "%s: a virtio-blk device per disk", name)
	}
}

// TestExpandTemplateErrors: what vm-runner-template says is wrong is the
// error, which the runner reports; a helper that is not there is named.
func TestExpandTemplateErrors(t *testing.T) {
	c, err := runnerconfig.Parse([]byte("\"/Runner\":\n  vm:\n    name: t\n"))
	require.NoError(t, err)
	m := NewMachine(&c.VM, "00000000-0000-4000-8000-000000000001", false, Firmware{}, "/run/vmrunner/t", func(string) bool { return false })
	dir := t.TempDir()
	path := filepath.Join(dir, v1.StandardTemplate)
	require.NoError(t, os.WriteFile(path, []byte("-name {{.Nme}}\n"), 0o644))
	_, err = ExpandTemplate(t.Context(), vmopbin.Build(t, TemplateHelper), "", []string{dir}, m)
	require.ErrorContains(t, err, "template "+path+": ")
	require.ErrorContains(t, err, "Nme")

	missing := filepath.Join(dir, TemplateHelper)
	_, err = ExpandTemplate(t.Context(), missing, "", nil, m)
	require.ErrorContains(t, err, missing+" (the qemu command's template): ")
}
