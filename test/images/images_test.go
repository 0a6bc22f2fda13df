// Package images tests vmop's container images as a user runs them: built
// by internal/imagebuild (what make images runs), imported into a real
// containerd and run by runc.
package images

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/internal/imagebuild"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/testcontainerd"
	"github.com/vmop/vmop/test/harness/testguest"
)

var (
	// built are the images every test uses, built once by TestMain.
	built   map[string]imagebuild.Built
	options imagebuild.Options
)

func TestMain(m *testing.M) {
	if prereq.ShortMain("vmop's images built from Debian packages (minutes)") {
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "vmop-images")
	if err == nil {
		err = build(dir)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the images: %v\n", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// build builds the images as make images does, with the version a test
// binary has ("devel"), so that what they render matches the golden files.
func build(dir string) error {
	var err error
	if options, err = imagebuild.DevOptions(filepath.Join(dir, "a")); err != nil {
		return err
	}
	options.Revision = "0123456789abcdef0123456789abcdef01234567"
	list, err := imagebuild.Build(options)
	if err != nil {
		return err
	}
	built = map[string]imagebuild.Built{}
	for _, b := range list {
		built[b.Name] = b
	}
	return nil
}

// TestReproducible builds every image a second time: the archives are the
// same to the byte, so the digests are too.
func TestReproducible(t *testing.T) {
	o := options
	o.Out = t.TempDir()
	again, err := imagebuild.Build(o)
	require.NoError(t, err)
	for _, b := range again {
		first := built[b.Name]
		d1, err := first.Image.Digest()
		require.NoError(t, err)
		d2, err := b.Image.Digest()
		require.NoError(t, err)
		require.Equal(t, d1, d2, "digest of %s", b.Name)
		require.Equal(t, fileHash(t, first.Archive), fileHash(t, b.Archive), "archive of %s", b.Name)
		s, err := imagebuild.Sizes(b.Image)
		require.NoError(t, err)
		t.Logf("%s %s: %.1f MiB compressed", b.Ref, d2, float64(s.Total)/(1<<20))
	}
}

func fileHash(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// TestRunnerImage runs the vm-runner image in containerd as a VM's pod
// would (privileged, its config mounted at /etc/opt/vmrunner): vm-runner
// finds Debian 13's OVMF for the default firmware, starts swtpm, writes the cloud-init disk, and the image's qemu boots the
// test guest with a SPICE display and a CD read over http (qemu's curl
// driver). vm-runner probe answers inside the container, and SIGTERM to
// the container shuts the guest down: exit 0.
func TestRunnerImage(t *testing.T) {
	ctrd := testcontainerd.Start(t)
	ref := importImage(t, ctrd, "vm-runner")
	// The distribution's kernel through the Linux boot protocol, not the
	// faster PVH entry: with a TPM, qemu 10 and SeaBIOS 1.16.3 leave the
	// PVH-booted kernel a zero-length ACPI table ("Invalid table length
	// 0x0 in RSDT/XSDT"), and without ACPI it never sees the power button.
	// Real guests boot through the firmware, as this one then does, and
	// OVMF (the default firmware, uefi) boots only the bzImage.
	guest := testguest.Build(t)

	var cdRequests atomic.Int32
	cd := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cdRequests.Add(1)
		http.ServeContent(w, r, "cd.iso", time.Time{}, bytes.NewReader(make([]byte, 1<<20)))
	}))
	t.Cleanup(cd.Close)

	// Short: qemu's sockets are in the runtime directory.
	dir, err := os.MkdirTemp("", "vmi")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"etc", "run", "templates"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o755))
	}
	std, _, err := templates.Read(templates.Standard)
	require.NoError(t, err)
	tmpl := string(std) + `
-qmp unix:{{opt .RuntimeDir}}/test.sock,server=on,wait=off
-kernel /guest/kernel
-initrd /guest/initrd
-append ` + guest.Append + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "templates", templates.Standard), []byte(tmpl), 0o644))
	spice := freeport.Get(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc", "config.yaml"), fmt.Appendf(nil, `"/Runner":
  runtimeDir: /run/vmrunner
  cloudInit:
    metaData: {local-hostname: imagetest}
    userData: {hostname: imagetest}
  vm:
    name: imagetest
    accelerator: tcg
    firmware: uefi
    useTpm: true
    maximumCpus: 2
    currentCpus: 1
    maximumRam: 512Mi
    powerdownTimeout: 60
    display: {spice: {port: %d}}
    drives:
    - {type: ide-cd, file: "%s/cd.iso"}
`, spice, cd.URL), 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := ctrd.Ctr(ctx, "run", "--rm", "--privileged", "--net-host",
		"--mount", "type=bind,src="+filepath.Join(dir, "etc")+",dst=/etc/opt/vmrunner,options=rbind:ro",
		"--mount", "type=bind,src="+filepath.Join(dir, "templates")+",dst=/opt/vmrunner/templates,options=rbind:ro",
		"--mount", "type=bind,src="+filepath.Join(dir, "run")+",dst=/run/vmrunner,options=rbind:rw",
		"--mount", "type=bind,src="+guest.BzImage+",dst=/guest/kernel,options=rbind:ro",
		"--mount", "type=bind,src="+guest.Initrd+",dst=/guest/initrd,options=rbind:ro",
		ref, "runner")
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	start := time.Now()
	require.NoError(t, run.Start())
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	waitFor(t, 3*time.Minute, exited, &out, func() error {
		b, _ := serialconsole.ReadHistory(filepath.Join(dir, "run"))
		if !strings.Contains(string(b), testguest.ReadyLine) {
			return fmt.Errorf("no %q on the guest's console", testguest.ReadyLine)
		}
		return nil
	})
	t.Logf("guest ready %s after ctr run", time.Since(start).Round(time.Millisecond))

	probe, err := ctrd.Ctr(ctx, "tasks", "exec", "--exec-id", "probe", "runner",
		"/usr/local/bin/vm-runner", "probe", "-c", "/etc/opt/vmrunner/config.yaml").CombinedOutput()
	require.NoError(t, err, "vm-runner probe in the container: %s", probe)

	// What ran is the image's: qemu 10 (the host has 7.2), its swtpm.
	q, err := qmp.Dial(ctx, filepath.Join(dir, "run", "test.sock"))
	require.NoError(t, err)
	defer q.Close()
	require.True(t, strings.HasPrefix(q.Version(), "10."), "qemu of the image (Debian 13), not the host's: %s", q.Version())
	var chardevs []struct{ Label, Filename string }
	require.NoError(t, q.Execute(ctx, "query-chardev", nil, &chardevs))
	require.Contains(t, fmt.Sprint(chardevs), "swtpm.sock", "qemu's TPM talks to the runner's swtpm")
	var blocks json.RawMessage
	require.NoError(t, q.Execute(ctx, "query-block", nil, &blocks))
	require.Contains(t, string(blocks), `"file": "`+cd.URL+`/cd.iso"`, "the CD is read over http")
	require.NotZero(t, cdRequests.Load(), "qemu's curl driver asked the CD's server")
	var spiceInfo struct {
		Enabled bool
		Port    int
	}
	require.NoError(t, q.Execute(ctx, "query-spice", nil, &spiceInfo))
	require.True(t, spiceInfo.Enabled)
	require.Equal(t, spice, spiceInfo.Port)
	q.Close()

	stop := time.Now()
	kill, err := ctrd.Ctr(ctx, "tasks", "kill", "--signal", "SIGTERM", "runner").CombinedOutput()
	require.NoError(t, err, "%s", kill)
	select {
	case err := <-exited:
		require.NoError(t, err, "the runner's exit status, through ctr run:\n%s", out.String())
	case <-time.After(90 * time.Second):
		t.Fatalf("the container did not end 90 s after SIGTERM:\n%s", out.String())
	}
	t.Logf("container ended %s after SIGTERM, exit 0", time.Since(stop).Round(time.Millisecond))
	require.Contains(t, out.String(), "The guest shut down cleanly")
}

// TestOperatorImage runs the vm-operator image read-only, as the image's
// non-root user, against a real API server: it answers /healthz and
// /readyz.
func TestOperatorImage(t *testing.T) {
	cluster := testcluster.NewWithOptions(t, testcluster.Options{CRDs: [][]byte{v1.CRDManifest}})
	ctrd := testcontainerd.Start(t)
	ref := importImage(t, ctrd, "vm-operator")
	health := freeport.Get(t)
	// The operator's user is not root: give it a kubeconfig it may read,
	// as a mounted Secret would be.
	kc, err := os.ReadFile(cluster.Kubeconfig)
	require.NoError(t, err)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, os.WriteFile(kubeconfig, kc, 0o644))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	run := ctrd.Ctr(ctx, "run", "--rm", "--net-host", "--read-only",
		"--mount", "type=bind,src="+kubeconfig+",dst=/etc/vmop/kubeconfig,options=rbind:ro",
		ref, "operator", "/vm-operator", "--kubeconfig", "/etc/vmop/kubeconfig", "--leader-elect=false",
		"--metrics-bind-address", "0", "--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", health))
	var out bytes.Buffer
	run.Stdout, run.Stderr = &out, &out
	require.NoError(t, run.Start())
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	for _, path := range []string{"/healthz", "/readyz"} {
		waitFor(t, time.Minute, exited, &out, func() error {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", health, path))
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s: %s", path, resp.Status)
			}
			return nil
		})
	}
	pid, err := ctrd.PID(ctx, "operator")
	require.NoError(t, err)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	require.Regexp(t, `(?m)^Uid:\s+65532\s+65532\s+65532\s+65532$`, string(status), "the operator runs as the image's non-root user")
	require.NoError(t, ctrd.Ctr(ctx, "tasks", "kill", "--signal", "SIGTERM", "operator").Run())
	select {
	case err := <-exited:
		require.NoError(t, err, "the operator stops cleanly on SIGTERM:\n%s", out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the operator did not stop on SIGTERM:\n%s", out.String())
	}
}

// TestFunctionImage runs the kubectl-vm image as kustomize and kpt run a
// KRM function: no arguments, the ResourceList on stdin, as the image's
// non-root user on a read-only root. It writes what the function's golden
// file holds. runc runs it from the unpacked image (an OCI bundle), since
// ctr run does not pass on the end of stdin.
func TestFunctionImage(t *testing.T) {
	prereq.Commands(t, "runc", "runc")
	krm := filepath.Join(options.Module, "pkg", "kubectl-vm", "cmd", "render", "testdata", "krm", "render")
	in, err := os.ReadFile(filepath.Join(krm, "input.yaml"))
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join(krm, "expected.yaml"))
	require.NoError(t, err)

	b := built["kubectl-vm"]
	img, err := imagebuild.ReadArchive(b.Archive, b.Ref)
	require.NoError(t, err)
	bundle := t.TempDir()
	require.NoError(t, imagebuild.Unpack(img, filepath.Join(bundle, "rootfs")))
	spec := exec.Command("runc", "spec", "--bundle", bundle)
	out, err := spec.CombinedOutput()
	require.NoError(t, err, "%s", out)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	var uid, gid uint32
	_, err = fmt.Sscanf(cfg.Config.User, "%d:%d", &uid, &gid)
	require.NoError(t, err, "the image's user %q", cfg.Config.User)
	editJSON(t, filepath.Join(bundle, "config.json"), func(c map[string]any) {
		p := c["process"].(map[string]any)
		p["terminal"] = false
		p["args"] = append(cfg.Config.Entrypoint, cfg.Config.Cmd...)
		p["env"] = cfg.Config.Env
		p["user"] = map[string]any{"uid": uid, "gid": gid}
		c["root"] = map[string]any{"path": "rootfs", "readonly": true}
	})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "runc", "--root", filepath.Join(bundle, "state"), "run", "--bundle", bundle, "function")
	run.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	run.Stderr = &stderr
	got, err := run.Output()
	require.NoError(t, err, "%s", stderr.String())
	require.Equal(t, string(want), string(got))
}

func editJSON(t *testing.T, path string, edit func(map[string]any)) {
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var c map[string]any
	require.NoError(t, json.Unmarshal(b, &c))
	edit(c)
	b, err = json.Marshal(c)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// importImage imports the archive of the named image and returns its
// reference, checking that containerd names it as the archive does.
func importImage(t *testing.T, ctrd *testcontainerd.Containerd, name string) string {
	t.Helper()
	b := built[name]
	require.Contains(t, ctrd.Import(t, b.Archive), b.Ref.Name())
	return b.Ref.Name()
}

// waitFor polls check until it passes, failing t with out when the
// container exits first or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, exited <-chan error, out *bytes.Buffer, check func() error) {
	t.Helper()
	eventually.Succeeds(t, timeout, func() error {
		select {
		case e := <-exited:
			t.Fatalf("the container exited (%v) while waiting:\n%s", e, out.String())
		default:
		}
		if err := check(); err != nil {
			return fmt.Errorf("%w\n%s", err, out.String())
		}
		return nil
	})
}
