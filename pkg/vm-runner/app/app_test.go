package app

import (
	"bytes"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/portforward"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/runnerexec"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vm-runner/diskupload"
	"github.com/vmop/vmop/pkg/vmpod"
)

// These tests run the command tree in the test's process: only paths
// that end before qemu, a socket or a signal would be needed.

// execute runs vm-runner with args.
func execute(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = Execute(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestFlags pins each command's flags and defaults, which the rendered
// pods, kubectl vm and users' scripts pass.
func TestFlags(t *testing.T) {
	config := vmpod.ConfigDir + "/" + vmpod.ConfigFile
	runFlags := map[string]string{
		"config": config, "template-dir": "[]", "qemu": "qemu-system-x86_64", "swtpm": "swtpm",
		"spice-address": "0.0.0.0", "debug": "false",
	}
	withLive := maps.Clone(runFlags)
	withLive["live"] = "false"
	for path, want := range map[string]map[string]string{
		"":        runFlags,
		"probe":   withLive,
		"check":   runFlags,
		"serial":  {"config": config, "follow": "false", "attach": "false", "who": "", "until-stdin-closes": "false"},
		"connect": {"config": config, "port": "0"},
		"import":  {"config": config, "scratch": vmpod.ImportScratchDir, "qemu-img": "qemu-img"},
		"disk receive": {
			"disk": "", "device": "", "claim-size": "0", "records": "", "scratch": "", "size": "0",
			"name": "stdin", "force": "false", "check": "false",
		},
		"disk fetch": {"from": vmpod.ContainerDiskDir, "to": "", "records": "", "disk": ""},
		"disk wait":  {},
		"copy-self":  {},
	} {
		t.Run(testName(path), func(t *testing.T) {
			cmd, _, err := NewCmd().Find(strings.Fields(path))
			require.NoError(t, err)
			require.Equal(t, strings.TrimSpace("vm-runner "+path), cmd.CommandPath())
			got := map[string]string{}
			cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
				if f.Name != "help" && f.Name != "version" {
					got[f.Name] = f.DefValue
				}
			})
			require.Equal(t, want, got)
			if c := cmd.LocalFlags().Lookup("config"); c != nil {
				require.Equal(t, "c", c.Shorthand)
			}
		})
	}
}

func testName(path string) string {
	if path == "" {
		return "run"
	}
	return path
}

// TestInvocations: the command lines that pkg/render puts into a VM's pod
// and kubectl vm runs through pods/exec parse as they are.
func TestInvocations(t *testing.T) {
	manifest, err := yaml.YAMLToJSON([]byte(`
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata: {name: vm, namespace: ns}
spec:
  vm:
    disks:
    - volumeClaimTemplate:
        metadata: {name: system}
        spec: {resources: {requests: {storage: 1Gi}}}
      source: {containerDisk: "example.com/disk:1"}
`))
	require.NoError(t, err)
	vm, err := v1.DecodeJSON(manifest)
	require.NoError(t, err)
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	pod := objs.StatefulSet.Spec.Template.Spec
	var lines [][]string
	for _, c := range append(pod.InitContainers, pod.Containers...) {
		// The runner image's entry point is vm-runner; a containerDisk
		// image runs the copy by its path.
		line := append(slices.Clone(c.Command), c.Args...)
		if len(c.Command) == 0 {
			line = append([]string{"vm-runner"}, line...)
		}
		lines = append(lines, line)
		if p := c.ReadinessProbe; p != nil && p.Exec != nil {
			lines = append(lines, p.Exec.Command)
		}
	}
	lines = append(lines,
		runnerexec.Command(runnerexec.ModeHistory, ""),
		runnerexec.Command(runnerexec.ModeFollow, ""),
		runnerexec.Command(runnerexec.ModeAttach, "me@host"),
		portforward.ConnectCommand(22),
		// kubectl vm disk upload's pod (pkg/kubectl-vm/cmd/disk).
		[]string{"vm-runner", "disk", "wait"},
		[]string{"vm-runner", "disk", "receive", "--disk", "root-disk", "--device", "/dev/vmop-disk",
			"--records", "/var/lib/vmop/imports", "--scratch", "/scratch", "--size", "10", "--name", "x.qcow2",
			"--claim-size", "20", "--force", "--check"},
		// The runner's own tests (pkg/vm-runner/runner) and test/node.
		[]string{"vm-runner", "-c", "c.yaml", "--template-dir", "t", "--debug"},
		[]string{"vm-runner", "probe", "-c", "c.yaml"},
		[]string{"vm-runner", "check", "-c", "c.yaml"},
		[]string{"vm-runner", "connect", "--port", "22", "-c", "c.yaml"},
	)
	seen := map[string]bool{}
	for _, line := range lines {
		require.Equal(t, "vm-runner", filepath.Base(line[0]), line)
		cmd, args, err := NewCmd().Find(line[1:])
		require.NoError(t, err, line)
		require.NoError(t, cmd.ParseFlags(args), line)
		require.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), line)
		require.True(t, cmd.Runnable(), line)
		seen[cmd.CommandPath()] = true
	}
	for _, path := range []string{"vm-runner", "vm-runner import", "vm-runner probe", "vm-runner copy-self", "vm-runner disk fetch", "vm-runner serial", "vm-runner connect"} {
		require.True(t, seen[path], "no invocation of %s", path)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args   string
		code   int
		stderr string
	}{
		{"bogus", runnerconfig.ExitConfig, `vm-runner: unknown command "bogus"`},
		{"serail", runnerconfig.ExitConfig, `vm-runner: unknown command "serail" (did you mean "serial"?)`},
		{"completion", runnerconfig.ExitConfig, `vm-runner: unknown command "completion"`},
		{"--bogus", runnerconfig.ExitConfig, "vm-runner: unknown flag: --bogus"},
		{"-c", runnerconfig.ExitConfig, "vm-runner: flag needs an argument: 'c' in -c"},
		{"probe --bogus", runnerconfig.ExitConfig, "vm-runner probe: unknown flag: --bogus"},
		{"check extra", runnerconfig.ExitConfig, `vm-runner check: unexpected argument "extra"`},
		{"import --bogus", runnerconfig.ExitConfig, "vm-runner import: unknown flag: --bogus"},
		{"import extra", runnerconfig.ExitConfig, `vm-runner import: unexpected argument "extra"`},
		{"connect --port x", runnerconfig.ExitConfig, `vm-runner connect: invalid argument "x" for "--port" flag`},
		{"connect extra", runnerconfig.ExitConfig, `vm-runner connect: unexpected argument "extra"`},
		// kubectl vm serial reads the reason from the first line; every
		// failure of serial exits 1.
		{"serial --bogus", 1, "vm-runner serial: unknown flag: --bogus"},
		{"serial extra", 1, `vm-runner serial: unexpected argument "extra"`},
		{"serial --follow --attach", 1, "vm-runner serial: --follow and --attach: choose one"},
		{"serial --who me", 1, "vm-runner serial: --who: only with --attach"},
		{"serial --until-stdin-closes", 1, "vm-runner serial: --until-stdin-closes: only with --follow"},
		{"disk", diskupload.ExitUsage, "vm-runner disk: a command is required: wait, receive or fetch"},
		{"disk bogus", diskupload.ExitUsage, `vm-runner disk: unknown command "bogus"`},
		{"disk wait extra", diskupload.ExitUsage, `vm-runner disk wait: unexpected argument "extra"`},
		{"disk receive --disk d", diskupload.ExitUsage, "vm-runner disk receive: --device is required\n--records is required\n--scratch is required"},
		{"disk receive --size x", diskupload.ExitUsage, `vm-runner disk receive: invalid argument "x" for "--size" flag`},
		{"disk fetch --disk d", diskupload.ExitUsage, "vm-runner disk fetch: --disk, --to and --records are required"},
		{"copy-self", diskupload.ExitUsage, "vm-runner copy-self: one argument, DEST, is required"},
		{"copy-self a b", diskupload.ExitUsage, "vm-runner copy-self: one argument, DEST, is required"},
		{"freeze --timeout 0s", runnerconfig.ExitConfig, "vm-runner freeze: --timeout 0s: must be above 0 and at most 10m0s"},
		{"freeze --timeout 11m", runnerconfig.ExitConfig, "vm-runner freeze: --timeout 11m0s: must be above 0 and at most 10m0s"},
		{"freeze extra", runnerconfig.ExitConfig, `vm-runner freeze: unexpected argument "extra"`},
		{"thaw --timeout 1m", runnerconfig.ExitConfig, "vm-runner thaw: unknown flag: --timeout"},
		{"snapshot", runnerconfig.ExitConfig, "vm-runner snapshot: a command is required: disks, push, serve, copy, data, restore-data or machine-id"},
		{"snapshot bogus", runnerconfig.ExitConfig, `vm-runner snapshot: unknown command "bogus"`},
		{"snapshot push --host h", runnerconfig.ExitConfig, "vm-runner snapshot push: --host and --export are required"},
		{"snapshot push --host h --export d=e", runnerconfig.ExitConfig, `vm-runner snapshot push: --export "d=e": want DISK=EXPORT:PORT`},
		{"snapshot serve", runnerconfig.ExitConfig, "vm-runner snapshot serve: --export is required"},
		{"snapshot serve --export a=/dev/x", runnerconfig.ExitConfig, `vm-runner snapshot serve: export "a=/dev/x": want NAME=PATH:SIZE`},
		{"snapshot serve --export a=/dev/x:0", runnerconfig.ExitConfig, `vm-runner snapshot serve: export "a=/dev/x:0": the size must be a number of bytes above 0`},
		{"snapshot copy --from a", runnerconfig.ExitConfig, "vm-runner snapshot copy: --from and --to are required, and --size is not negative"},
		{"snapshot restore-data extra", runnerconfig.ExitConfig, `vm-runner snapshot restore-data: unexpected argument "extra"`},
	} {
		t.Run(tc.args, func(t *testing.T) {
			code, stdout, stderr := execute(strings.Fields(tc.args)...)
			require.Equal(t, tc.code, code, stderr)
			require.Empty(t, stdout)
			first, rest, _ := strings.Cut(stderr, "\nRun '")
			require.Contains(t, first, tc.stderr)
			require.True(t, strings.HasPrefix(first, tc.stderr), "%q", stderr)
			require.Regexp(t, `^vm-runner[a-z -]* --help' for usage.\n$`, rest)
		})
	}
}

// TestConfigErrors: a config file that cannot be read ends each command
// with its code, before anything is started.
func TestConfigErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.yaml")
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		// Every run flag parses: the run stops at the config.
		{[]string{"-c", missing, "--template-dir", "a,b", "--qemu", "q", "--swtpm", "s", "--spice-address", "127.0.0.1", "--debug"},
			runnerconfig.ExitConfig, `level=ERROR msg="Cannot run the VM" err="open ` + missing},
		{[]string{"check", "--config=" + missing}, runnerconfig.ExitConfig, `level=ERROR msg="Cannot run the VM" err="open ` + missing},
		{[]string{"import", "-c", missing, "--scratch", t.TempDir()}, runnerconfig.ExitConfig, `level=ERROR msg="Cannot read the config" err="open ` + missing},
		{[]string{"probe", "-c", missing}, 1, "not ready: open " + missing},
		{[]string{"serial", "-c", missing, "--follow"}, 1, "vm-runner serial: open " + missing},
		{[]string{"connect", "-c", missing, "--port", "22"}, runnerconfig.ExitFailed, "vm-runner connect: "},
		{[]string{"connect", "-c", missing, "--port", "65536"}, runnerconfig.ExitConfig, "vm-runner connect: --port 65536: must be a number from 1 to 65535\n"},
	} {
		t.Run(strings.Join(tc.args[:1], " "), func(t *testing.T) {
			code, _, stderr := execute(tc.args...)
			require.Equal(t, tc.code, code, stderr)
			require.Contains(t, stderr, tc.stderr)
			require.NotContains(t, stderr, "--help' for usage", "not a usage error")
		})
	}
}

func TestHelpAndVersion(t *testing.T) {
	code, stdout, stderr := execute("--help")
	require.Zero(t, code)
	require.Empty(t, stderr)
	for _, c := range NewCmd().Commands() {
		require.Contains(t, stdout, "\n  "+c.Name()+" ", "the help lists %s", c.Name())
	}
	require.Contains(t, stdout, "-c, --config string")

	for _, args := range [][]string{{"serial", "--help"}, {"help", "serial"}, {"serial", "-h"}} {
		code, stdout, _ = execute(args...)
		require.Zero(t, code)
		require.Contains(t, stdout, "--until-stdin-closes", args)
	}
	code, stdout, _ = execute("disk", "receive", "--help")
	require.Zero(t, code)
	require.Contains(t, stdout, "vm-runner disk receive --disk DISK")

	code, stdout, _ = execute("--version")
	require.Zero(t, code)
	require.Equal(t, "vm-runner version "+version.Get()+"\n", stdout, "cobra's own form: a version template would link text/template")
}

// TestEveryCommandSetsItsUsageCode: a command added later without
// usageCode would exit with cobra's default handling.
func TestEveryCommandSetsItsUsageCode(t *testing.T) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Name() != "help" {
			code, _, stderr := execute(append(strings.Fields(strings.TrimPrefix(c.CommandPath(), "vm-runner")), "--no-such-flag")...)
			require.NotZero(t, code, c.CommandPath())
			require.Contains(t, stderr, c.CommandPath()+": unknown flag: --no-such-flag")
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(NewCmd())
}
