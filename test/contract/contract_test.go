// Package contract tests one contract from the CRD to qemu: a
// VirtualMachine that the API server accepts is one that vmop's validation
// accepts (and the other way round), renders to objects the API server
// accepts, gives a runner config that loads, and a qemu that starts.
// VirtualMachines are drawn at random from the CRD's schema (test/harness/vmgen)
// with a fixed seed; VMOP_CONTRACT_SPECS, VMOP_CONTRACT_QEMU and
// VMOP_CONTRACT_SEED make a longer run (make contract).
package contract

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmgen"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// TestMain builds vm-runner-template, which the runners run, once.
func TestMain(m *testing.M) {
	os.Exit(vmopbin.Main(m))
}

// Bounds of the run in make test: a few seconds of API calls and a few
// dozen qemu starts.
const (
	defaultSpecs = 400
	defaultQemu  = 30
	defaultSeed  = 1
)

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	require.NoError(t, err, "%s", name)
	return n
}

// tally counts what a run saw, for its log line.
type tally struct {
	specs, accepted, rejected, qemu, cdProblems, nodeOnly int
}

func TestContract(t *testing.T) {
	specs := envInt(t, "VMOP_CONTRACT_SPECS", defaultSpecs)
	qemuStarts := envInt(t, "VMOP_CONTRACT_QEMU", defaultQemu)
	seed := envInt(t, "VMOP_CONTRACT_SEED", defaultSeed)
	prereq.Commands(t, "qemu-system-x86", "qemu-system-x86_64")
	c := testcluster.New(t)
	ctx := t.Context()
	require.NoError(t, c.InstallCRD(ctx, v1.CRDManifest))
	dc, err := dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	gen, err := vmgen.New(uint64(seed))
	require.NoError(t, err)
	q := newQemuChecker(t)

	var n tally
	started := time.Now()
	for i := range specs {
		u := &unstructured.Unstructured{Object: gen.VM("default", gen.Name(i))}
		n.specs++
		objs := checkSpec(t, ctx, dc, u, &n)
		if objs == nil || n.qemu >= qemuStarts {
			continue
		}
		if !t.Run(fmt.Sprintf("qemu/%s", u.GetName()), func(t *testing.T) { q.check(t, objs, &n) }) {
			t.Logf("the spec:\n%s", specYAML(u))
		}
	}
	t.Logf("seed %d: %d specs in %s: %d accepted by both, %d refused by both; %d qemu starts (%d with a CD drive left empty, %d refused for a CPU model only the node's qemu knows)",
		seed, n.specs, time.Since(started).Round(time.Second), n.accepted, n.rejected, n.qemu, n.cdProblems, n.nodeOnly)
	require.NotZero(t, n.accepted, "no spec was accepted: the generator is broken")
	require.NotZero(t, n.rejected, "no spec was refused: the generator draws no edge cases")
}

// checkSpec compares the API server's verdict on u with validation's and,
// when both accept, dry-runs the rendered objects on the server. It returns
// them when u is a VM for qemu, else nil.
func checkSpec(t *testing.T, ctx context.Context, dc dynamic.Interface, u *unstructured.Unstructured, n *tally) *render.Objects {
	t.Helper()
	_, serverErr := dc.Resource(v1.GroupVersionResource).Namespace(u.GetNamespace()).
		Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if serverErr != nil && !apierrors.IsInvalid(serverErr) && !apierrors.IsBadRequest(serverErr) {
		require.NoError(t, serverErr, "the API server failed on:\n%s", specYAML(u))
	}
	objs, renderErr := renderVM(u)
	switch {
	case serverErr == nil && knownDifference(renderErr):
		n.rejected++
		return nil
	case serverErr == nil && renderErr != nil:
		t.Errorf("the API server accepts %s, validation refuses it:\n%v\nthe spec:\n%s", u.GetName(), renderErr, specYAML(u))
		return nil
	case serverErr != nil && renderErr == nil:
		t.Errorf("validation accepts %s, the API server refuses it:\n%v\nthe spec:\n%s", u.GetName(), serverErr, specYAML(u))
		return nil
	case serverErr != nil:
		n.rejected++
		return nil
	}
	n.accepted++
	for _, o := range objs.List() {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		require.NoError(t, err)
		ou := &unstructured.Unstructured{Object: obj}
		gvk := ou.GroupVersionKind()
		res := schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: strings.ToLower(gvk.Kind) + "s"}
		if _, err := dc.Resource(res).Namespace(ou.GetNamespace()).Create(ctx, ou, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("%s renders to a %s that the API server refuses: %v\nthe spec:\n%s", u.GetName(), gvk.Kind, err, specYAML(u))
			return nil
		}
	}
	if _, err := runnerconfig.Parse([]byte(objs.ConfigMap.Data[vmpod.ConfigFile])); err != nil {
		t.Errorf("%s renders to a runner config that does not load: %v\nthe spec:\n%s", u.GetName(), err, specYAML(u))
		return nil
	}
	return objs
}

// knownDifferences are the fields that validation checks and the CRD
// cannot: a structural schema cannot say "an object or a string", and CEL
// rules that parse quantities or match keys of maps inside lists exceed
// the API server's cost budget for a schema. The API server takes such a
// VM; the operator refuses it (InvalidSpec) before it applies anything.
var knownDifferences = []string{
	"spec.cloudInit.userData",
	"spec.vm.disks[*].volumeClaimTemplate.metadata.labels",
	"spec.vm.disks[*].volumeClaimTemplate.metadata.annotations",
	"spec.vm.disks[*].volumeClaimTemplate.spec.resources.requests[storage]", // 0
	"spec.resources.requests",                                               // above its limit
}

// knownDifference tells whether err is validation's and names only fields
// of knownDifferences.
func knownDifference(err error) bool {
	var invalid *render.InvalidError
	if !errors.As(err, &invalid) {
		return false
	}
	for _, fe := range invalid.Errors {
		field := indexes.ReplaceAllString(fe.Field, "[*]")
		if !slices.ContainsFunc(knownDifferences, func(p string) bool { return strings.HasPrefix(field, p) }) {
			return false
		}
	}
	return true
}

var indexes = regexp.MustCompile(`\[[0-9]+\]`)

// renderVM decodes u as the plugin and operator do and renders it.
func renderVM(u *unstructured.Unstructured) (*render.Objects, error) {
	b, err := u.MarshalJSON()
	if err != nil {
		return nil, err
	}
	vm, err := v1.DecodeJSON(b)
	if err != nil {
		return nil, err
	}
	return render.Render(vm, render.Options{})
}

func specYAML(u *unstructured.Unstructured) string {
	b, _ := yaml.Marshal(u.Object)
	return string(b)
}

// nodeOnly tells whether err is qemu refusing what only the node's qemu
// can judge: a CPU model it does not know (models come and go with qemu
// versions). Such a refusal must come as runnerconfig.ExitQemuRefused with
// qemu's words, which the VM's Failed condition (QemuFailed) shows.
func nodeOnly(err error) bool {
	var exit *runner.ExitError
	return errors.As(err, &exit) && exit.Code == runnerconfig.ExitQemuRefused && strings.Contains(err.Error(), "unable to find CPU model")
}

// qemuChecker starts each VM's runner config with vm-runner's Check: qemu
// paused, the config applied over QMP, qemu quit. What a pod provides is
// replaced by the test's: a sparse file for each claim, an image
// repository with debian.iso, a free SPICE port on 127.0.0.1.
type qemuChecker struct {
	repo string // the image repository
}

func newQemuChecker(t *testing.T) *qemuChecker {
	repo := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(repo, "isos"), 0o755))
	for _, f := range []string{"debian.iso", "isos/debian.iso", "a,b.iso"} {
		require.NoError(t, os.WriteFile(filepath.Join(repo, f), make([]byte, 4096), 0o644))
	}
	return &qemuChecker{repo: repo}
}

func (q *qemuChecker) check(t *testing.T, objs *render.Objects, n *tally) {
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "vmc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	etc := filepath.Join(dir, "etc")
	require.NoError(t, os.MkdirAll(filepath.Join(etc, vmpod.CloudInitDir), 0o755))
	if objs.Secret != nil {
		for k, v := range objs.Secret.Data {
			require.NoError(t, os.WriteFile(filepath.Join(etc, vmpod.CloudInitDir, k), v, 0o600))
		}
	}
	f, err := runnerconfig.Decode([]byte(objs.ConfigMap.Data[vmpod.ConfigFile]))
	require.NoError(t, err)
	q.localize(t, &f.Runner, dir)
	b, err := json.Marshal(f)
	require.NoError(t, err)
	config := filepath.Join(etc, vmpod.ConfigFile)
	require.NoError(t, os.WriteFile(config, b, 0o644))

	var out strings.Builder
	r, err := runner.New(runner.Options{
		ConfigFile:     config,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		QemuOutput:     &out,
		SpiceAddress:   "127.0.0.1",
		TemplateHelper: vmopbin.Build(t, runner.TemplateHelper),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err = r.Check(ctx)
	n.qemu++
	if nodeOnly(err) {
		n.nodeOnly++
		return
	}
	require.NoError(t, err, "qemu refused a VM that the API server and validation accept; qemu said:\n%s", out.String())
	for _, p := range r.Status().CDProblems {
		// Only media that do not exist may be missing: the pools' URL
		// points at a closed port of this host.
		if _, err := os.Stat(p.Image); err == nil || (strings.Contains(p.Image, "://") && !strings.Contains(p.Image, "missing")) {
			t.Errorf("CD drive %s: %s: %s", p.Drive, p.Image, p.Err)
		}
		n.cdProblems++
	}
}

// localize points the config at what this test provides in place of a
// pod: data and runtime directories, claims, image repository, a free
// SPICE port. A tap network becomes a user network: its bridge helper
// needs a bridge on the host, which is issue of the node, not the spec.
func (q *qemuChecker) localize(t *testing.T, c *runnerconfig.Config, dir string) {
	c.DataDir, c.RuntimeDir = filepath.Join(dir, "data"), filepath.Join(dir, "run")
	c.VM.Accelerator = "tcg"
	for i := range c.VM.Drives {
		d := &c.VM.Drives[i]
		switch {
		case d.ClaimSize > 0:
			// A Filesystem claim's directory: the runner makes disk.img.
			claim := filepath.Join(dir, fmt.Sprintf("claim%d", i))
			require.NoError(t, os.Mkdir(claim, 0o755))
			d.Resource = filepath.Join(claim, vmpod.DiskFileName)
		case d.Resource != "":
			disk := filepath.Join(dir, fmt.Sprintf("disk%d.raw", i))
			require.NoError(t, os.WriteFile(disk, nil, 0o644))
			require.NoError(t, os.Truncate(disk, 64<<20))
			d.Resource = disk
		case strings.HasPrefix(d.File, vmpod.ImageRepositoryDir+"/"):
			d.File = filepath.Join(q.repo, strings.TrimPrefix(d.File, vmpod.ImageRepositoryDir+"/"))
		}
	}
	// A bridge of the host, or the pod's network, which the runner sets up
	// only in a pod: qemu checks a NIC of the same model on a user network.
	for i := range c.VM.Network {
		if n := &c.VM.Network[i]; n.Type == runnerconfig.NetworkTap || n.Type == runnerconfig.NetworkPod {
			n.Type, n.Bridge, n.Net, n.Ports = runnerconfig.NetworkUser, "", "", nil
		}
	}
	if d := c.VM.Display; d != nil && d.Spice != nil {
		ports, err := freeport.Ports(1)
		require.NoError(t, err)
		d.Spice.Port = int32(ports[0])
	}
}
