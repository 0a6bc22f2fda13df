package cloudinit

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/test/harness/prereq"
)

func metaMap(t testing.TB, d Data) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(d.MetaData, &m))
	return m
}

func TestFromConfig(t *testing.T) {
	d, err := FromConfig(&runnerconfig.CloudInit{
		MetaData: map[string]any{"zone": "a", "instance-id": "given"},
		UserData: map[string]any{"users": []any{map[string]any{"name": "admin"}}, "hostname": "h"},
		NetworkConfig: map[string]any{"version": 2, "ethernets": map[string]any{
			"id0": map[string]any{"match": map[string]any{"name": "en*"}, "dhcp4": true}}},
	}, "test-vm")
	require.NoError(t, err)
	require.Equal(t, "instance-id: given\nlocal-hostname: test-vm\nzone: a\n", string(d.MetaData))
	require.Equal(t, "#cloud-config\nhostname: h\nusers:\n- name: admin\n", string(d.UserData))
	require.Equal(t, "ethernets:\n  id0:\n    dhcp4: true\n    match:\n      name: en*\nversion: 2\n", string(d.NetworkConfig))

	// Same input, same bytes: the map order must not leak out.
	for range 20 {
		again, err := FromConfig(&runnerconfig.CloudInit{
			MetaData: map[string]any{"zone": "a", "instance-id": "given"},
			UserData: map[string]any{"users": []any{map[string]any{"name": "admin"}}, "hostname": "h"},
			NetworkConfig: map[string]any{"version": 2, "ethernets": map[string]any{
				"id0": map[string]any{"match": map[string]any{"name": "en*"}, "dhcp4": true}}},
		}, "test-vm")
		require.NoError(t, err)
		require.Equal(t, d, again)
	}
}

func TestFromConfigUserDataString(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"cloud-config kept", "#cloud-config\nusers: []\n", "#cloud-config\nusers: []\n"},
		{"script kept", "#!/bin/sh\necho hi\n", "#!/bin/sh\necho hi\n"},
		{"include kept", "#include\nhttp://example.com/ud\n", "#include\nhttp://example.com/ud\n"},
		{"bare mapping gets header", "users: []\npackages: [git]\n", "#cloud-config\nusers: []\npackages: [git]\n"},
		{"plain text kept", "just some text\n", "just some text\n"},
		{"mime kept", "Content-Type: multipart/mixed; boundary=\"x\"\nMIME-Version: 1.0\n\n--x--\n", "Content-Type: multipart/mixed; boundary=\"x\"\nMIME-Version: 1.0\n\n--x--\n"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := FromConfig(&runnerconfig.CloudInit{UserData: tc.in}, "vm")
			require.NoError(t, err)
			require.Equal(t, tc.want, string(d.UserData))
		})
	}
}

func TestFromConfigErrors(t *testing.T) {
	_, err := FromConfig(&runnerconfig.CloudInit{UserData: []any{"a"}}, "test-vm")
	require.ErrorContains(t, err, "test-vm: cloudInit.userData: must be a string or an object")

	d, err := FromConfig(nil, "test-vm")
	require.NoError(t, err)
	require.Equal(t, "test-vm", metaMap(t, d)["local-hostname"])
	require.Empty(t, d.UserData)
	require.Empty(t, d.NetworkConfig)
}

func TestFromDir(t *testing.T) {
	_, ok, err := FromDir(filepath.Join(t.TempDir(), "nope"))
	require.NoError(t, err)
	require.False(t, ok, "missing directory")

	dir := t.TempDir()
	_, ok, err = FromDir(dir)
	require.NoError(t, err)
	require.False(t, ok, "empty directory")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "user-data"), []byte("#cloud-config\n"), 0o600))
	d, ok, err := FromDir(dir)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, Data{UserData: []byte("#cloud-config\n")}, d)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "meta-data"), []byte("instance-id: a\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "network-config"), []byte("version: 2\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vendor-data"), []byte("ignored"), 0o600))
	d, ok, err = FromDir(dir)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "instance-id: a\n", string(d.MetaData))
	require.Equal(t, "version: 2\n", string(d.NetworkConfig))

	// A file where the directory should be is an error, not "no data".
	file := filepath.Join(dir, "meta-data")
	_, _, err = FromDir(file)
	require.Error(t, err)
}

// A projected Secret volume holds symlinks into a "..data" directory.
func TestFromDirProjectedSecret(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_01_01_00_00_00.1")
	require.NoError(t, os.Mkdir(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "user-data"), []byte("#!/bin/sh\n"), 0o600))
	require.NoError(t, os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")))
	require.NoError(t, os.Symlink("..data/user-data", filepath.Join(dir, "user-data")))
	d, ok, err := FromDir(dir)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "#!/bin/sh\n", string(d.UserData))
}

func TestDefaultInstanceID(t *testing.T) {
	idFor := func(d Data, vm string) string {
		t.Helper()
		require.NoError(t, d.Default(vm))
		s, _ := metaMap(t, d)["instance-id"].(string)
		require.Regexp(t, `^iid-[0-9a-f]{16}$`, s)
		return s
	}
	id := func(d Data) string { t.Helper(); return idFor(d, "vm") }
	base := Data{MetaData: []byte("zone: a\n"), UserData: []byte("#cloud-config\nusers: []\n"), NetworkConfig: []byte("version: 2\n")}
	first := id(base)
	require.Equal(t, first, id(base), "same data, same id")
	require.Equal(t, first, id(Data{MetaData: []byte("{zone: a}"), UserData: base.UserData, NetworkConfig: base.NetworkConfig}),
		"meta-data counts by content, not by layout")

	changed := base
	changed.UserData = []byte("#cloud-config\nusers: [admin]\n")
	require.NotEqual(t, first, id(changed), "new user-data")
	changed = base
	changed.NetworkConfig = []byte("version: 1\n")
	require.NotEqual(t, first, id(changed), "new network-config")
	changed = base
	changed.MetaData = []byte("zone: b\n")
	require.NotEqual(t, first, id(changed), "new meta-data")
	require.NotEqual(t, first, idFor(base, "other-vm"), "new host name")

	// Bytes moved from one file to the next are a change too.
	a := id(Data{UserData: []byte("#cloud-config\nfoo: 1\n")})
	b := id(Data{UserData: []byte("#cloud-config\n"), NetworkConfig: []byte("foo: 1\n")})
	require.NotEqual(t, a, b)

	// A given id stays, byte for byte.
	d := Data{MetaData: []byte("# mine\ninstance-id: fixed\nlocal-hostname: h\n")}
	require.NoError(t, d.Default("vm"))
	require.Equal(t, "# mine\ninstance-id: fixed\nlocal-hostname: h\n", string(d.MetaData))
}

func TestDefaultHostname(t *testing.T) {
	d := Data{}
	require.NoError(t, d.Default("test-vm"))
	m := metaMap(t, d)
	require.Equal(t, "test-vm", m["local-hostname"])
	require.Len(t, m, 2)
	// Keys are sorted.
	require.True(t, strings.HasPrefix(string(d.MetaData), "instance-id: iid-"), string(d.MetaData))

	d = Data{MetaData: []byte("local-hostname: chosen\n")}
	require.NoError(t, d.Default("test-vm"))
	require.Equal(t, "chosen", metaMap(t, d)["local-hostname"])

	// Numbers in meta-data stay exact when it is written anew.
	d = Data{MetaData: []byte("big: 12345678901234567890\n")}
	require.NoError(t, d.Default("test-vm"))
	require.Contains(t, string(d.MetaData), "big: 12345678901234567890\n")
}

func TestDefaultCloudConfigHeader(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"users: []\n", true},
		{"\nusers: []\n", true},
		{"{users: []}", true},
		{"#cloud-config\nusers: []\n", false},
		{"#!/bin/bash\necho\n", false},
		{"#include\nhttp://x\n", false},
		{"## template: jinja\n#cloud-config\n", false},
		{"", false},
		{"\n\n", false},
		{"- a\n- b\n", false},
		{"echo hello\n", false},
		{"MIME-Version: 1.0\nContent-Type: text/plain\n\nx\n", false},
		{"\x1f\x8b\x08\x00", false},
	} {
		d := Data{UserData: []byte(tc.in)}
		require.NoError(t, d.Default("vm"), "%q", tc.in)
		want := tc.in
		if tc.want {
			want = "#cloud-config\n" + tc.in
		}
		require.Equal(t, want, string(d.UserData), "%q", tc.in)
		// Once is enough.
		require.NoError(t, d.Default("vm"))
		require.Equal(t, want, string(d.UserData), "%q again", tc.in)
	}
}

func TestDefaultBadMetaData(t *testing.T) {
	for _, in := range []string{"- a\n- b\n", "just text", "a: [\n", "\tx: y"} {
		d := Data{MetaData: []byte(in), UserData: []byte("users: []\n")}
		before := d
		err := d.Default("vm")
		require.ErrorContains(t, err, "meta-data", "%q", in)
		require.Equal(t, before, d, "unchanged on error")
	}
}

// Tools from the Debian packages util-linux (blkid) and genisoimage
// (isoinfo) read the image: they were not written against go-diskfs.
func tool(t testing.TB, name, pkg string) string {
	t.Helper()
	prereq.Beyond(t, name+" ("+pkg+")")
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} { // not in PATH for users
		if p := filepath.Join(dir, name); isExecutable(p) {
			return p
		}
	}
	t.Fatalf("%s not found (Debian package %s): run `make deps`", name, pkg)
	return ""
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

func TestWriteISO(t *testing.T) {
	blkid := tool(t, "blkid", "util-linux")
	isoinfo := tool(t, "isoinfo", "genisoimage")

	d, err := FromConfig(&runnerconfig.CloudInit{
		UserData: map[string]any{"users": []any{map[string]any{"name": "admin", "ssh_authorized_keys": []any{"ssh-ed25519 AAAA test"}}}},
		NetworkConfig: map[string]any{"version": 2, "ethernets": map[string]any{
			"id0": map[string]any{"match": map[string]any{"name": "en*"}, "dhcp4": true}}},
	}, "test-vm")
	require.NoError(t, err)
	// Something spanning several sectors, to see the layout hold.
	d.UserData = append(d.UserData, []byte("write_files:\n- path: /etc/big\n  content: \""+strings.Repeat("x", 5000)+"\"\n")...)

	img := filepath.Join(t.TempDir(), "seed.iso")
	require.NoError(t, WriteISO(img, d))

	blk := run(t, blkid, "-p", "-o", "export", img)
	require.Contains(t, strings.Split(blk, "\n"), "LABEL=cidata", blk)
	require.Contains(t, strings.Split(blk, "\n"), "TYPE=iso9660", blk)

	require.Equal(t, []string{"/meta-data", "/network-config", "/user-data"}, isoFiles(t, isoinfo, img))
	for name, want := range map[string][]byte{"meta-data": d.MetaData, "user-data": d.UserData, "network-config": d.NetworkConfig} {
		require.Equal(t, string(want), run(t, isoinfo, "-R", "-i", img, "-x", "/"+name), name)
	}

	// Readable by anyone who mounts it in the guest, not just root.
	require.Regexp(t, `(?m)^d..xr-xr-x .* \. $`, run(t, isoinfo, "-R", "-l", "-i", img))

	fi, err := os.Stat(img)
	require.NoError(t, err)
	require.Zero(t, fi.Size()%isoSector, "whole sectors")
	entries, err := os.ReadDir(filepath.Dir(img))
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files left: %v", entries)
}

func isoFiles(t testing.TB, isoinfo, img string) []string {
	t.Helper()
	return strings.Fields(run(t, isoinfo, "-R", "-f", "-i", img))
}

func TestWriteISOWithoutNetworkConfig(t *testing.T) {
	blkid := tool(t, "blkid", "util-linux")
	isoinfo := tool(t, "isoinfo", "genisoimage")

	// Not even user-data: NoCloud needs the file anyway.
	d := Data{}
	require.NoError(t, d.Default("test-vm"))
	img := filepath.Join(t.TempDir(), "seed.iso")
	require.NoError(t, WriteISO(img, d))

	blk := run(t, blkid, "-p", "-o", "export", img)
	require.Contains(t, strings.Split(blk, "\n"), "LABEL=cidata", blk)
	require.Equal(t, []string{"/meta-data", "/user-data"}, isoFiles(t, isoinfo, img))
	require.Equal(t, string(d.MetaData), run(t, isoinfo, "-R", "-i", img, "-x", "/meta-data"))
	require.Equal(t, "", run(t, isoinfo, "-R", "-i", img, "-x", "/user-data"))
}

func TestWriteISOReplaces(t *testing.T) {
	isoinfo := tool(t, "isoinfo", "genisoimage")
	dir := t.TempDir()
	img := filepath.Join(dir, "seed.iso")

	require.NoError(t, WriteISO(img, Data{MetaData: []byte("instance-id: one\n"), UserData: []byte("#cloud-config\n"), NetworkConfig: []byte("version: 2\n")}))
	// A leftover from a crash does not get in the way.
	require.NoError(t, os.WriteFile(img+".tmp", []byte("junk"), 0o600))
	require.NoError(t, WriteISO(img, Data{MetaData: []byte("instance-id: two\n"), UserData: []byte("#cloud-config\n")}))

	require.Equal(t, "instance-id: two\n", run(t, isoinfo, "-R", "-i", img, "-x", "/meta-data"))
	require.Equal(t, []string{"/meta-data", "/user-data"}, isoFiles(t, isoinfo, img))
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary files left: %v", entries)

	// A directory that is not there fails cleanly.
	require.Error(t, WriteISO(filepath.Join(dir, "missing", "seed.iso"), Data{}))
}

func FuzzDefault(f *testing.F) {
	f.Add([]byte(""), []byte(""))
	f.Add([]byte("instance-id: x\n"), []byte("#cloud-config\nusers: []\n"))
	f.Add([]byte("local-hostname: h\nbig: 1e400\n"), []byte("users: []\n"))
	f.Add([]byte("- a\n"), []byte("a: &x [*x]\n"))
	f.Add([]byte("{a: {b: [1, 2]}}"), []byte("MIME-Version: 1.0\n"))
	f.Add([]byte("instance-id: null\nlocal-hostname: ''\n"), []byte("\x1f\x8b"))
	f.Fuzz(func(t *testing.T, meta, user []byte) {
		in := Data{MetaData: bytes.Clone(meta), UserData: bytes.Clone(user)}
		d := in
		err := d.Default("vm")
		if err != nil {
			require.NotEmpty(t, err.Error())
			require.Contains(t, err.Error(), "meta-data")
			require.Equal(t, in, d, "unchanged on error")
			return
		}
		var m map[string]any
		require.NoError(t, yaml.Unmarshal(d.MetaData, &m), "%q", d.MetaData)
		require.False(t, missing(m, "instance-id"), "%q", d.MetaData)
		require.False(t, missing(m, "local-hostname"), "%q", d.MetaData)
		require.False(t, needsCloudConfigHeader(d.UserData), "%q", d.UserData)

		// Deterministic and idempotent.
		d2 := Data{MetaData: bytes.Clone(meta), UserData: bytes.Clone(user)}
		require.NoError(t, d2.Default("vm"))
		require.Equal(t, d, d2)
		d3 := d
		require.NoError(t, d3.Default("vm"))
		require.Equal(t, d, d3)
	})
}

func BenchmarkWriteISO(b *testing.B) {
	d, err := FromConfig(&runnerconfig.CloudInit{
		UserData: map[string]any{"users": []any{map[string]any{"name": "admin", "ssh_authorized_keys": []any{"ssh-ed25519 AAAA test"}}}},
		NetworkConfig: map[string]any{"version": 2, "ethernets": map[string]any{
			"id0": map[string]any{"match": map[string]any{"name": "en*"}, "dhcp4": true}}},
	}, "test-vm")
	require.NoError(b, err)
	img := filepath.Join(b.TempDir(), "seed.iso")
	for b.Loop() {
		if err := WriteISO(img, d); err != nil {
			b.Fatal(err)
		}
	}
}

// TestControlCharacters: user data with DEL and C1 characters, which
// encoding/json leaves unescaped, still becomes a cloud-config.
func TestControlCharacters(t *testing.T) {
	s := "a\x7fb\u0085c"
	y, err := userData(map[string]any{"write_files": []any{map[string]any{"content": s}}})
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, yaml.Unmarshal(y, &back))
	require.Equal(t, s, back["write_files"].([]any)[0].(map[string]any)["content"])
}
