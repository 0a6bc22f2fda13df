package expand_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/expand"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
)

// machine is a VM with a bit of everything the standard template uses.
func machine(t *testing.T) *runner.Machine {
	t.Helper()
	c, err := runnerconfig.Parse([]byte(`"/Runner":
  vm:
    name: desk
    maximumRam: 4Gi
    currentRam: 2Gi
    maximumCpus: 4
    currentCpus: 2
    useTpm: true
    network:
    - type: pod
    drives:
    - type: raw
      file: /var/local/vm-data/disk.img
      bootindex: 1
    - type: ide-cd
      file: /isos/a.iso
    display:
      outputs: 2
      spice:
        port: 5910
        usbRedirects: 2
`))
	require.NoError(t, err)
	m := runner.NewMachine(&c.VM, "00000000-0000-4000-8000-000000000001", true, runner.Firmware{Code: "/c.fd", Vars: "/v,ars.fd"},
		"/run/vmrunner/desk", func(string) bool { return false })
	m.TPMSocket, m.CloudInitISO, m.Ticketing = "/run/vmrunner/desk/swtpm.sock", "/run/vmrunner/desk/ci.iso", true
	return m
}

func run(t *testing.T, req any) (int, []string, string) {
	t.Helper()
	in, err := json.Marshal(req)
	require.NoError(t, err)
	var out, errOut bytes.Buffer
	code := expand.Main(bytes.NewReader(in), &out, &errOut)
	var args []string
	if code == 0 {
		require.NoError(t, json.Unmarshal(out.Bytes(), &args), out.String())
	}
	return code, args, errOut.String()
}

// TestMainAsInProcess: the machine that the runner sends as JSON gives
// the arguments that the machine itself gives.
func TestMainAsInProcess(t *testing.T) {
	m := machine(t)
	tmpl, err := expand.Load("")
	require.NoError(t, err)
	want, err := tmpl.Args(m)
	require.NoError(t, err)
	code, got, stderr := run(t, runner.TemplateRequest{Machine: m})
	require.Zero(t, code, stderr)
	require.Equal(t, want, got)
	joined := strings.Join(got, " ")
	for _, s := range []string{"-m 4096M", "-smp 2,maxcpus=4", "-accel kvm", "filename=/v,,ars.fd", "bootindex=1",
		"-tpmdev emulator", "usbredir1", "max_outputs=2", "disable-ticketing=off"} {
		require.Contains(t, joined, s)
	}
}

// TestMainErrors: what is wrong reaches stderr, with the template's file.
func TestMainErrors(t *testing.T) {
	var out, errOut bytes.Buffer
	require.Equal(t, 1, expand.Main(strings.NewReader("{"), &out, &errOut))
	require.Contains(t, errOut.String(), "the request on stdin")
	require.Empty(t, out.String())

	code, _, stderr := run(t, runner.TemplateRequest{})
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "no machine")

	dir := t.TempDir()
	path := filepath.Join(dir, templates.Standard)
	require.NoError(t, os.WriteFile(path, []byte("-name {{.Name}\n"), 0o644))
	code, _, stderr = run(t, runner.TemplateRequest{Dirs: []string{dir}, Machine: machine(t)})
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "template "+path+": ")

	require.NoError(t, os.WriteFile(path, []byte("-name {{.NoSuchField}}\n"), 0o644))
	code, _, stderr = run(t, runner.TemplateRequest{Dirs: []string{dir}, Machine: machine(t)})
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "template "+path+": ")
	require.Contains(t, stderr, "NoSuchField")

	code, _, stderr = run(t, runner.TemplateRequest{Template: "../x", Machine: machine(t)})
	require.Equal(t, 1, code)
	require.NotEmpty(t, stderr)
}
