package create_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/create"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/plugintest"
)

// Golden files: testdata/create/<case>.yaml; rewrite them with
// "go test ./pkg/kubectl-vm/cmd/create -update".

var (
	userData = filepath.Join("testdata", "inputs", "user-data.yaml")
	sshKey   = filepath.Join("testdata", "inputs", "id_ed25519.pub")
)

// run runs "kubectl vm ARGS" in-process.
func run(t testing.TB, args ...string) plugintest.Result {
	t.Helper()
	return plugintest.Run(t.Context(), "", args...)
}

// goldenCases are flag sets whose -o yaml output is a golden file.
var goldenCases = map[string][]string{
	// Only defaults: a user network, stopped.
	"minimal": {"create", "test-vm"},
	// An installer: the empty system disk boots first, then the CD.
	"installer": {"create", "debian", "--cpus", "2", "--ram", "4Gi", "--disk", "40Gi", "--cdrom", "debian-12.iso"},
	// Every flag.
	"full": {"create", "desktop", "-n", "vmop-demo", "--cpus", "2", "--max-cpus", "4", "--ram", "2Gi", "--max-ram", "8Gi",
		"--disk", "80Gi,rook-ceph-block", "--disk", "200Gi", "--cdrom", "https://example.org/virtio-win.iso", "--cdrom", "",
		"--network", "tap:br1", "--network", "user", "--cloud-init-user-data", userData, "--ssh-key", sshKey, "--running"},
	// A server from a cloud image, checked by its checksum.
	"cloud-image": {"create", "web", "--disk", "20Gi", "--ssh-key", sshKey, "--running",
		"--image", "https://cloud.debian.org/images/cloud/trixie/latest/debian-13-genericcloud-amd64.qcow2",
		"--image-checksum", "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"},
	// A cloud image on a storage class without Block volumes.
	"filesystem": {"create", "web", "--disk", "20Gi,local-path", "--volume-mode", "Filesystem",
		"--image", "https://cloud.debian.org/images/cloud/trixie/latest/debian-13-genericcloud-amd64.qcow2"},
	// A containerDisk image, as KubeVirt users have them.
	"container-disk": {"create", "fedora", "--disk", "8Gi", "--image", "docker://quay.io/containerdisks/fedora:41"},
	// A key without user data: the user data is the key list.
	"ssh-key": {"create", "server", "--ssh-key", sshKey, "--network", "none", "--max-ram", "3Gi"},
}

// TestGolden checks the -o yaml output of each flag set, and that it
// decodes, validates and renders like any VirtualMachine manifest.
func TestGolden(t *testing.T) {
	for name, args := range goldenCases {
		t.Run(name, func(t *testing.T) {
			out := plugintest.GoldenYAML(t, filepath.Join("testdata", "create", name+".yaml"), args...)
			vm := decodeOne(t, out)
			require.Equal(t, args[1], vm.Name)
			_, err := render.Render(vm, render.Options{})
			require.NoError(t, err)
		})
	}
}

// decodeOne decodes the only document of a YAML stream strictly, as
// kubectl vm render does.
func decodeOne(t *testing.T, stream string) *v1.VirtualMachine {
	t.Helper()
	r := manifest.NewReader(strings.NewReader(stream))
	d, err := r.Next()
	require.NoError(t, err)
	require.True(t, v1.IsVirtualMachine(d.APIVersion, d.Kind))
	vm, err := v1.DecodeJSON(d.JSON)
	require.NoError(t, err)
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF, "one document")
	return vm
}

// TestWhatTheFlagsMean checks the full case's VM field by field, beyond
// its golden file: what a reader of the flags' help expects.
func TestWhatTheFlagsMean(t *testing.T) {
	r := run(t, append(goldenCases["full"], "-o", "yaml")...)
	require.NoError(t, r.Err)
	vm := decodeOne(t, r.Stdout)
	s := vm.Spec.VM
	require.Equal(t, "vmop-demo", vm.Namespace)
	require.Equal(t, v1.StateRunning, s.State)
	require.EqualValues(t, 2, *s.CurrentCPUs)
	require.EqualValues(t, 4, *s.MaximumCPUs)
	require.Equal(t, v1.Quantity("2Gi"), s.CurrentRAM)
	require.Equal(t, v1.Quantity("8Gi"), s.MaximumRAM)
	require.Len(t, s.Disks, 4)
	require.Equal(t, "system-disk", s.DiskName(0))
	require.EqualValues(t, 0, *s.Disks[0].Bootindex)
	require.Equal(t, "rook-ceph-block", *s.Disks[0].VolumeClaimTemplate.Spec.StorageClassName)
	require.Equal(t, "data-1-disk", s.DiskName(1))
	require.Nil(t, s.Disks[1].Bootindex, "a data disk does not boot")
	require.Nil(t, s.Disks[1].VolumeClaimTemplate.Spec.StorageClassName, "the cluster's default class")
	require.Equal(t, "https://example.org/virtio-win.iso", s.Disks[2].CDROM.Image)
	require.EqualValues(t, 1, *s.Disks[2].Bootindex, "the CD boots after the system disk")
	require.Empty(t, s.Disks[3].CDROM.Image, "an empty drive")
	require.Equal(t, "br1", s.Networks[0].Tap.Bridge)
	require.NotNil(t, s.Networks[1].User)

	var ud struct {
		Hostname string   `json:"hostname"`
		Users    []any    `json:"users"`
		Keys     []string `json:"ssh_authorized_keys"`
	}
	require.NoError(t, vm.Spec.CloudInit.UserData.Decode(&ud))
	require.Equal(t, "demo", ud.Hostname)
	require.Len(t, ud.Users, 2)
	key, err := os.ReadFile(sshKey)
	require.NoError(t, err)
	require.Equal(t, []string{
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHxblaK4jdlqjCo3JHFRgsLwodVX1Q8ZNKxSlSkmrU0y already-listed@example",
		strings.TrimSpace(string(key)),
	}, ud.Keys, "the file's keys stay, --ssh-key's follow")

	// The runner gets the keys in the cloud-init Secret.
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	require.Contains(t, string(objs.Secret.Data["user-data"]), "admin@example")
	require.Equal(t, int32(1), *objs.StatefulSet.Spec.Replicas, "--running")
}

// TestJSON: -o json is the YAML case's VM, in a List as the plugin's
// other commands write JSON.
func TestJSON(t *testing.T) {
	r := run(t, append(goldenCases["installer"], "-o", "json")...)
	require.NoError(t, r.Err)
	var list struct {
		Kind  string            `json:"kind"`
		Items []json.RawMessage `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.Stdout), &list))
	require.Equal(t, "List", list.Kind)
	require.Len(t, list.Items, 1)
	fromJSON, err := v1.DecodeJSON(list.Items[0])
	require.NoError(t, err)
	y := run(t, append(goldenCases["installer"], "-o", "yaml")...)
	require.Equal(t, decodeOne(t, y.Stdout), fromJSON)
}

// TestDryRunClient: no -o, no cluster: kubectl's line, marked dry run.
func TestDryRunClient(t *testing.T) {
	r := run(t, "--kubeconfig", filepath.Join(t.TempDir(), "none"), "create", "x", "--dry-run=client")
	require.NoError(t, r.Err)
	require.Equal(t, "virtualmachine.vmoperator.jdrupes.org/x created (dry run)\n", r.Stdout)
	r = run(t, "create", "x", "--dry-run")
	require.NoError(t, r.Err, "--dry-run alone is client")
}

// TestWarnings: what render warns about is passed on; the VM is still
// printed.
func TestWarnings(t *testing.T) {
	r := run(t, "create", "x", "--ram", "1500Ki", "-o", "yaml")
	require.NoError(t, r.Err)
	require.Equal(t, "Warning: spec.vm.maximumRam 1500Ki is not a whole number of MiB: the VM gets 2Mi (qemu sizes RAM in MiB)\n", r.Stderr)
	require.Contains(t, r.Stdout, "currentRam: 1500Ki")
}

// badInput is input that must be refused: args and what the error says.
// Each error names its flag.
func badInput(t *testing.T) map[string]struct {
	args []string
	want []string
} {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKey(priv, "test")
	require.NoError(t, err)
	privateKey := write("id_ed25519", string(pem.EncodeToMemory(block)))
	list := write("list.yaml", "- a\n- b\n")
	script := write("script.sh", "#!/bin/sh\necho hi\n")
	broken := write("broken.yaml", "hostname: [a\n")
	badKeys := write("keys.yaml", "ssh_authorized_keys: ssh-ed25519 AAAA\n")
	empty := write("empty.pub", "# no key\n\n")
	type c = struct {
		args []string
		want []string
	}
	return map[string]c{
		"bad size":             {[]string{"--ram", "4Gx"}, []string{`--ram: spec.vm.maximumRam: Invalid value: "4Gx": must be a quantity such as 4Gi or 512Mi`}},
		"bad max size":         {[]string{"--ram", "1Gi", "--max-ram", "lots"}, []string{`--max-ram: spec.vm.maximumRam: Invalid value: "lots"`}},
		"0 cpus":               {[]string{"--cpus", "0"}, []string{"--cpus: spec.vm.currentCpus: Invalid value: 0: must be at least 1"}},
		"negative cpus":        {[]string{"--cpus", "-2"}, []string{"--cpus: spec.vm.currentCpus: Invalid value: -2: must be at least 1"}},
		"cpus above max":       {[]string{"--cpus", "8", "--max-cpus", "4"}, []string{"--cpus: spec.vm.currentCpus: Invalid value: 8: must not exceed maximumCpus (4)"}},
		"too many cpus":        {[]string{"--max-cpus", "100000"}, []string{"--max-cpus: spec.vm.maximumCpus: Invalid value: 100000"}},
		"too many --cpus":      {[]string{"--cpus", "100000"}, []string{"--cpus: spec.vm.maximumCpus: Invalid value: 100000: must be between 1 and"}},
		"ram below minimum":    {[]string{"--ram", "512Ki"}, []string{`--ram: spec.vm.maximumRam: Invalid value: "512Ki": must be at least 1Mi`}},
		"ram above max":        {[]string{"--ram", "4Gi", "--max-ram", "2Gi"}, []string{`--ram: spec.vm.currentRam: Invalid value: "4Gi": must not exceed maximumRam (2Gi)`}},
		"disk size":            {[]string{"--disk", "40GB"}, []string{`--disk "40GB": "40GB" is not a size such as 40Gi or 500G`}},
		"disk size 0":          {[]string{"--disk", "1Gi", "--disk", "0"}, []string{`--disk "0": spec.vm.disks[1].volumeClaimTemplate.spec.resources.requests[storage]: Invalid value: "0": must be more than 0`}},
		"storage class syntax": {[]string{"--disk", "40Gi,Fast_SSD"}, []string{`--disk "40Gi,Fast_SSD": storage class "Fast_SSD": a lowercase RFC 1123 subdomain`}},
		"storage class empty":  {[]string{"--disk", "40Gi,"}, []string{`--disk "40Gi,": no storage class after the comma`}},
		"three disk parts":     {[]string{"--disk", "40Gi,fast,rwx"}, []string{`--disk "40Gi,fast,rwx": give SIZE or SIZE,STORAGECLASS, not 3 parts`}},
		"cdrom on two lines":   {[]string{"--cdrom", "a.iso\nb.iso"}, []string{`--cdrom "a.iso\nb.iso": spec.vm.disks[0].cdrom.image`}},
		"too many cdroms":      {[]string{"--cdrom", "", "--cdrom", "", "--cdrom", "", "--cdrom", "", "--cdrom", "", "--cdrom", "", "--cdrom", ""}, []string{"--disk/--cdrom: spec.vm.disks: Invalid value"}},
		"image without disk":   {[]string{"--image", "https://example.com/a.qcow2"}, []string{"--image fills the system disk: give a --disk too"}},
		"checksum alone":       {[]string{"--disk", "1Gi", "--image-checksum", "sha256:00"}, []string{"--image-checksum checks --image: give an --image too"}},
		"image scheme":         {[]string{"--disk", "1Gi", "--image", "ftp://example.com/a.qcow2"}, []string{`--image: spec.vm.disks[0].source.url: Invalid value: "ftp://example.com/a.qcow2": must be an http or https URL`}},
		"image path":           {[]string{"--disk", "1Gi", "--image", "../a.qcow2"}, []string{`--image: spec.vm.disks[0].source.file: Invalid value: "../a.qcow2"`}},
		"image checksum":       {[]string{"--disk", "1Gi", "--image", "a.qcow2", "--image-checksum", "sha256:00"}, []string{`--image-checksum: spec.vm.disks[0].source.checksum: Invalid value: "sha256:00": must be sha256: and 64 hex digits`}},
		"network":              {[]string{"--network", "bridge"}, []string{`--network "bridge": use pod, user, tap, tap:BRIDGE or none`}},
		"network none and":     {[]string{"--network", "none", "--network", "user"}, []string{"--network none cannot be combined"}},
		"bridge name":          {[]string{"--network", "tap:br/0"}, []string{`--network: spec.vm.networks[0].tap.bridge: Invalid value: "br/0"`}},
		"name":                 {[]string{"--cpus", "1"}, nil}, // replaced below: the name is the argument
		"missing user data":    {[]string{"--cloud-init-user-data", filepath.Join(dir, "nope.yaml")}, []string{"--cloud-init-user-data " + strconv.Quote(filepath.Join(dir, "nope.yaml")) + ": no such file or directory"}},
		"user data not YAML":   {[]string{"--cloud-init-user-data", broken}, []string{"--cloud-init-user-data " + strconv.Quote(broken) + ": not YAML: yaml: line 1"}},
		"user data a list":     {[]string{"--cloud-init-user-data", list}, []string{"--cloud-init-user-data " + strconv.Quote(list) + ": not cloud-config: the YAML must be a mapping", "not a list"}},
		"user data a script":   {[]string{"--cloud-init-user-data", script}, []string{"--cloud-init-user-data " + strconv.Quote(script) + ": not cloud-config", "not a single value"}},
		"keys not a list":      {[]string{"--cloud-init-user-data", badKeys, "--ssh-key", sshKey}, []string{"--cloud-init-user-data " + strconv.Quote(badKeys) + ": ssh_authorized_keys must be a list of keys"}},
		"missing ssh key":      {[]string{"--ssh-key", filepath.Join(dir, "id.pub")}, []string{"--ssh-key " + strconv.Quote(filepath.Join(dir, "id.pub")) + ": no such file or directory"}},
		"private key":          {[]string{"--ssh-key", privateKey}, []string{"--ssh-key " + strconv.Quote(privateKey) + ": a private key: give the public key (the .pub file)"}},
		"not a key":            {[]string{"--ssh-key", userData}, []string{"--ssh-key " + strconv.Quote(userData) + ": line 4: not an SSH public key"}},
		"no key":               {[]string{"--ssh-key", empty}, []string{"--ssh-key " + strconv.Quote(empty) + ": no public key in the file"}},
		"output":               {[]string{"-o", "xml"}, []string{`--output "xml" is not supported: use one of yaml, json`}},
		"dry run":              {[]string{"--dry-run=maybe"}, []string{`--dry-run "maybe" is not supported: use one of none, client, server`}},
		"namespace":            {[]string{"-n", "No_Such"}, []string{`--namespace: metadata.namespace: Invalid value: "No_Such"`}},
	}
}

// TestBadInput: bad flags are refused before anything is printed or sent,
// with lower-case errors that name the flag; all of v1's problems at once.
func TestBadInput(t *testing.T) {
	for name, tc := range badInput(t) {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"create", "test-vm"}, tc.args...)
			if name == "name" {
				args[1], tc.want = "Test_VM", []string{`name "Test_VM": metadata.name: Invalid value: "Test_VM"`}
			}
			outputs := []string{"-o=yaml", "--dry-run=client"}
			switch name {
			case "output":
				outputs = outputs[1:]
			case "dry run":
				outputs = outputs[:1]
			}
			for _, output := range outputs {
				r := run(t, append(args, output)...)
				require.Error(t, r.Err)
				requireNamesFlag(t, r.Err)
				for _, w := range tc.want {
					require.Contains(t, r.Err.Error(), w)
				}
				require.Empty(t, r.Stdout, "nothing printed")
			}
		})
	}
	r := run(t, "create", "x", "--cpus", "0", "--ram", "1Ki", "--disk", "0", "-o", "yaml")
	require.Error(t, r.Err)
	require.Len(t, strings.Split(r.Err.Error(), "\n"), 3, "every problem of v1's validation at once:\n%v", r.Err)
	requireNamesFlag(t, r.Err)
	r = run(t, "create", "x", "--disk", "1x", "--disk", "1Gi,A", "--network", "wifi", "--ssh-key", "/nonexistent", "-o", "yaml")
	require.Error(t, r.Err)
	require.Len(t, strings.Split(r.Err.Error(), "\n"), 4, "every problem of the flags' syntax at once:\n%v", r.Err)
	requireNamesFlag(t, r.Err)
}

// requireNamesFlag checks that every line of err starts with a flag (or
// the name argument), so that no line starts with a capital.
func requireNamesFlag(t *testing.T, err error) {
	t.Helper()
	for _, line := range strings.Split(err.Error(), "\n") {
		require.True(t, strings.HasPrefix(line, "--") || strings.HasPrefix(line, "name "), "%q names no flag", line)
		require.False(t, unicode.IsUpper(rune(line[0])))
	}
}

// FuzzFlags: whatever the numbers and sizes, the command prints a VM that
// renders, or refuses with errors that name flags; it never panics.
func FuzzFlags(f *testing.F) {
	f.Add(int32(2), int32(4), "4Gi", "8Gi", "40Gi,fast", "debian.iso")
	f.Add(int32(0), int32(-1), "1Ki", "", "0", "")
	f.Add(int32(1<<30), int32(1), "1e100", "-1", "1Ei,a.b", "http://x/\n")
	f.Add(int32(3), int32(3), "1.5Mi", "0.1", "9223372036854775807,", "a,b")
	f.Fuzz(func(t *testing.T, cpus, maxCPUs int32, ram, maxRAM, disk, cdrom string) {
		args := []string{"create", "fuzz", "-o", "yaml", "--cpus=" + itoa(cpus), "--max-cpus=" + itoa(maxCPUs),
			"--ram=" + ram, "--max-ram=" + maxRAM, "--disk=" + disk, "--cdrom=" + cdrom}
		r := run(t, args...)
		if r.Err != nil {
			requireNamesFlag(t, r.Err)
			require.Empty(t, r.Stdout)
			return
		}
		vm := decodeOne(t, r.Stdout)
		_, err := render.Render(vm, render.Options{})
		var invalid *render.InvalidError
		require.False(t, errors.As(err, &invalid), "printed a VM that does not validate: %v", err)
	})
}

func itoa(n int32) string { return strconv.Itoa(int(n)) }

// FuzzParseDisk: a --disk value that parses has a size that prints and
// parses back to itself, and a storage class that is a valid name.
func FuzzParseDisk(f *testing.F) {
	for _, s := range []string{"40Gi", "40Gi,fast", "1e3,a.b-c", "40Gi,", ",x", "0.5Ti,Fast", "1,2,3", "\x00", "99999999999999999999999Ei"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		size, class, err := create.ParseDisk(s)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		again, err := resource.ParseQuantity(size.String())
		require.NoError(t, err, "size %s", size.String())
		require.Zero(t, size.Cmp(again))
		if class != "" {
			require.Empty(t, validation.IsDNS1123Subdomain(class))
		}
		require.True(t, strings.HasSuffix(s, class))
	})
}
