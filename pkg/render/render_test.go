package render_test

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vmpod"
)

// TestDeterministic renders every valid golden case repeatedly, also from
// several goroutines at once (the YAML writer pools its buffers), and
// wants the same bytes each time.
func TestDeterministic(t *testing.T) {
	for _, name := range goldenCases(t) {
		if strings.HasPrefix(name, "error-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			first := renderCase(t, name, manifest.FormatYAML).out
			require.NotEmpty(t, first)
			var wg sync.WaitGroup
			outs := make([][]byte, 8)
			for i := range outs {
				wg.Go(func() { outs[i] = renderCase(t, name, manifest.FormatYAML).out })
			}
			wg.Wait()
			for i, out := range outs {
				require.True(t, bytes.Equal(first, out), "render %d differs from the first", i)
			}
		})
	}
}

const hashBase = `apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: hash-vm
  namespace: vmop-demo
  labels:
    team: a
spec:
  cloudInit:
    userData:
      hostname: hash-vm
  loadBalancerService: {}
  vm:
    maximumCpus: 4
    currentCpus: 2
    maximumRam: 4Gi
`

// hashes renders a VM and returns the render-hash of each object by kind,
// and the pod template's restart-hash under "restart".
func hashes(t *testing.T, manifestYAML string, opts render.Options) map[string]string {
	t.Helper()
	vm, err := v1.DecodeJSON(mustJSON(t, manifestYAML))
	require.NoError(t, err)
	objs, err := render.Render(vm, opts)
	require.NoError(t, err)
	list := objs.List()
	require.Len(t, list, 4, "ConfigMap, Secret, StatefulSet, Service")
	out := map[string]string{}
	for _, o := range list {
		h := o.(metav1.Object).GetAnnotations()[render.AnnotationHash]
		require.NotEmpty(t, h)
		out[o.GetObjectKind().GroupVersionKind().Kind] = h
	}
	out["restart"] = objs.StatefulSet.Spec.Template.Annotations[render.AnnotationRestartHash]
	require.NotEmpty(t, out["restart"])
	return out
}

func mustJSON(t *testing.T, y string) []byte {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	require.NoError(t, err)
	return j
}

// TestHashAnnotation checks that each object's hash changes exactly when
// what it is rendered from changes, so that the operator writes only the
// objects that changed, and that the restart hash ignores live changes.
func TestHashAnnotation(t *testing.T) {
	base := hashes(t, hashBase, render.Options{})
	require.Equal(t, base, hashes(t, hashBase, render.Options{}), "same input, same hashes")

	same := map[string]string{
		"labels changed":      strings.Replace(hashBase, "team: a", "team: b\n    extra: label", 1),
		"annotations added":   strings.Replace(hashBase, "  labels:", "  annotations:\n    note: x\n  labels:", 1),
		"defaults spelled":    hashBase + "    state: Stopped\n    firmware: uefi\n    powerdownTimeout: 900\n",
		"resourceVersion set": strings.Replace(hashBase, "  labels:", "  resourceVersion: \"42\"\n  labels:", 1),
		"reset counter 0":     strings.Replace(hashBase, "  labels:", "  annotations:\n    "+v1.AnnotationResetCounter+": \"0\"\n  labels:", 1),
	}
	for name, y := range same {
		require.Equal(t, base, hashes(t, y, render.Options{}), name)
	}

	all := []string{"ConfigMap", "Secret", "StatefulSet", "Service", "restart"}
	cd := hashBase + "    disks:\n    - cdrom: {image: a.iso}\n"
	reset1 := strings.Replace(hashBase, "  labels:", "  annotations:\n    "+v1.AnnotationResetCounter+": \"1\"\n  labels:", 1)
	for _, c := range []struct {
		name, base, changed string
		differ              []string
	}{
		{"currentCpus", hashBase, strings.Replace(hashBase, "currentCpus: 2", "currentCpus: 3", 1), []string{"ConfigMap"}},
		{"currentRam", hashBase, hashBase + "    currentRam: 2Gi\n", []string{"ConfigMap"}},
		{"cd image", cd, strings.Replace(cd, "a.iso", "b.iso", 1), []string{"ConfigMap"}},
		// An annotation, not spec: the runner resets the guest live.
		{"reset counter", hashBase, reset1, []string{"ConfigMap"}},
		{"reset counter bumped", reset1, strings.Replace(reset1, `: "1"`, `: "2"`, 1), []string{"ConfigMap"}},
		{"state", hashBase, hashBase + "    state: Running\n", []string{"StatefulSet"}},
		{"powerdownTimeout", hashBase, hashBase + "    powerdownTimeout: 60\n", []string{"ConfigMap", "StatefulSet"}},
		{"cloud-init", hashBase, strings.Replace(hashBase, "hostname: hash-vm", "hostname: other", 1), []string{"Secret", "StatefulSet", "restart"}}, // the guest reads it at boot
		{"service", hashBase, strings.Replace(hashBase, "loadBalancerService: {}", "loadBalancerService: {labels: {a: b}}", 1), []string{"Service"}},
		{"maximumRam", hashBase, strings.Replace(hashBase, "maximumRam: 4Gi", "maximumRam: 8Gi", 1), []string{"ConfigMap", "StatefulSet", "restart"}},
		{"image", hashBase, strings.Replace(hashBase, "spec:\n", "spec:\n  image: {source: example.com/runner:2}\n", 1), []string{"StatefulSet", "restart"}},
		{"guest shutdown", hashBase, strings.Replace(hashBase, "spec:\n", "spec:\n  guestShutdownStops: true\n", 1), []string{"ConfigMap", "StatefulSet", "restart"}},
		{"name", hashBase, strings.ReplaceAll(hashBase, "name: hash-vm", "name: hash-vm2"), all},
		{"namespace", hashBase, strings.Replace(hashBase, "namespace: vmop-demo", "namespace: other", 1), all},
	} {
		before, after := hashes(t, c.base, render.Options{}), hashes(t, c.changed, render.Options{})
		var differ []string
		for _, k := range all {
			if before[k] != after[k] {
				differ = append(differ, k)
			}
		}
		require.Equal(t, c.differ, differ, "%s: the hashes that change", c.name)
	}
	opt := hashes(t, hashBase, render.Options{DisplaySecret: "other"})
	require.NotEqual(t, base["StatefulSet"], opt["StatefulSet"], "options are part of the StatefulSet's hash")
	require.NotEqual(t, base["restart"], opt["restart"], "options are part of the restart hash")
}

// TestRenderKeepsInput checks that Render works on a copy: the caller's
// object (say, from an informer cache) must not be defaulted in place.
func TestRenderKeepsInput(t *testing.T) {
	vm, err := v1.DecodeJSON(mustJSON(t, hashBase))
	require.NoError(t, err)
	before := vm.DeepCopy()
	_, err = render.Render(vm, render.Options{})
	require.NoError(t, err)
	require.Equal(t, before, vm)
}

func TestRenderInvalid(t *testing.T) {
	y := strings.Replace(hashBase, "currentCpus: 2", "currentCpus: 5", 1)
	y = strings.Replace(y, "maximumRam: 4Gi", "maximumRam: 4Gx", 1)
	vm, err := v1.DecodeJSON(mustJSON(t, y))
	require.NoError(t, err)
	objs, err := render.Render(vm, render.Options{})
	require.Nil(t, objs)
	var invalid *render.InvalidError
	require.True(t, errors.As(err, &invalid), "%T", err)
	require.Equal(t, "hash-vm", invalid.Name)
	// Every line names the VM and the field, as the design's conventions say.
	for _, l := range strings.Split(err.Error(), "\n") {
		require.True(t, strings.HasPrefix(l, "hash-vm: spec.vm."), l)
	}
	require.Contains(t, err.Error(), `hash-vm: spec.vm.maximumRam: Invalid value: "4Gx"`)
	require.Contains(t, err.Error(), "hash-vm: spec.vm.currentCpus: Invalid value: 5")

	// Validate says the same without rendering, and leaves vm as it was.
	before := vm.DeepCopy()
	require.Equal(t, err, render.Validate(vm, render.Options{}))
	require.Equal(t, before, vm)
	valid, err := v1.DecodeJSON(mustJSON(t, hashBase))
	require.NoError(t, err)
	require.NoError(t, render.Validate(valid, render.Options{}))
}

// TestResetCounter: the annotation's value reaches the runner config; a
// value that is no count is a validation error naming the annotation.
func TestResetCounter(t *testing.T) {
	render1 := func(value string) (*render.Objects, error) {
		y := strings.Replace(hashBase, "  labels:", "  annotations:\n    "+v1.AnnotationResetCounter+": \""+value+"\"\n  labels:", 1)
		vm, err := v1.DecodeJSON(mustJSON(t, y))
		require.NoError(t, err)
		return render.Render(vm, render.Options{})
	}
	objs, err := render1("7")
	require.NoError(t, err)
	c, err := runnerconfig.Parse([]byte(objs.ConfigMap.Data[vmpod.ConfigFile]))
	require.NoError(t, err)
	require.EqualValues(t, 7, c.ResetCounter)

	for _, bad := range []string{"", "x", "-1", "1.5", "99999999999999999999"} {
		objs, err := render1(bad)
		require.Nil(t, objs, "%q", bad)
		var invalid *render.InvalidError
		require.ErrorAs(t, err, &invalid, "%q", bad)
		require.Equal(t, `hash-vm: metadata.annotations[vmoperator.jdrupes.org/reset-counter]: Invalid value: "`+bad+`": must be a non-negative integer`, err.Error())
	}
}

// TestListOrder: what is mounted comes before the StatefulSet, so that a
// plain kubectl apply creates it first.
func TestListOrder(t *testing.T) {
	vm, err := v1.DecodeJSON(mustJSON(t, hashBase))
	require.NoError(t, err)
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	var kinds []string
	for _, o := range objs.List() {
		kinds = append(kinds, o.GetObjectKind().GroupVersionKind().Kind)
	}
	require.Equal(t, []string{"ConfigMap", "Secret", "StatefulSet", "Service"}, kinds)
}

// TestDrainWait: the drain annotation adds a PodDisruptionBudget that
// allows no eviction of the VM's pod, last, and changes no other object,
// so that setting it neither rewrites nor restarts a running VM.
func TestDrainWait(t *testing.T) {
	vm, err := v1.DecodeJSON(mustJSON(t, hashBase))
	require.NoError(t, err)
	before, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	require.Nil(t, before.DisruptionBudget)

	vm.Annotations = map[string]string{v1.AnnotationDrain: v1.DrainWait}
	after, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	pdb := after.DisruptionBudget
	require.NotNil(t, pdb)
	require.Equal(t, []runtime.Object{after.ConfigMap, after.Secret, after.StatefulSet, after.Service, pdb}, after.List())
	require.Equal(t, before.List(), after.List()[:4])
	require.Equal(t, render.Labels(vm.Name), pdb.Labels)
	require.Equal(t, after.StatefulSet.Spec.Selector, pdb.Spec.Selector, "the VM's pod and only it")
	require.Equal(t, intstr.FromInt32(0), *pdb.Spec.MaxUnavailable)
	require.NotEmpty(t, pdb.Annotations[render.AnnotationHash])
}

// TestFilesystemDisk: a disk PVC with volumeMode Filesystem cannot be a
// volumeDevice (the kubelet refuses to start such a pod), so it must be
// either rejected with its field path or not rendered as a block device.
func TestFilesystemDisk(t *testing.T) {
	y := hashBase + `    disks:
    - volumeClaimTemplate:
        metadata:
          name: data
        spec:
          volumeMode: Filesystem
          resources:
            requests:
              storage: 10Gi
`
	vm, err := v1.DecodeJSON(mustJSON(t, y))
	require.NoError(t, err)
	objs, err := render.Render(vm, render.Options{})
	if err != nil {
		require.Contains(t, err.Error(), "hash-vm: spec.vm.disks[0].volumeClaimTemplate.spec.volumeMode")
		return
	}
	for _, d := range objs.StatefulSet.Spec.Template.Spec.Containers[0].VolumeDevices {
		require.NotEqual(t, "data-disk", d.Name, "a Filesystem volume listed as a volumeDevice: the pod cannot start")
	}
}

// TestPassThroughNoEmptyDocuments: a document after "---\n---" is copied
// without its leading separator; else the output gains an empty document.
func TestPassThroughNoEmptyDocuments(t *testing.T) {
	in := `apiVersion: v1
kind: ConfigMap
metadata:
  name: a
---
---
# comment of b
apiVersion: v1
kind: ConfigMap
metadata:
  name: b
`
	res := renderBytes(t, []byte(in), manifest.FormatYAML, render.StreamOptions{})
	require.Empty(t, res.problems)
	require.NotContains(t, string(res.out), "---\n---\n")
	docs := parseYAMLStream(t, res.out)
	require.Len(t, docs, 2, "output:\n%s", res.out)
	require.Contains(t, string(res.out), "# comment of b\n", "comments are kept")
}

// TestRunnerImage: a VM without spec.image runs the runner of this build's
// version, from ImageRegistry when given; its own spec.image always wins.
func TestRunnerImage(t *testing.T) {
	old := version.Version
	t.Cleanup(func() { version.Version = old })
	version.Version = "v1.2.3"
	image := func(vm *v1.VirtualMachine, opts render.Options) string {
		objs, err := render.Render(vm, opts)
		require.NoError(t, err)
		return objs.StatefulSet.Spec.Template.Spec.Containers[0].Image
	}
	vm, err := v1.DecodeJSON(mustJSON(t, hashBase))
	require.NoError(t, err)
	vm.Spec.Image = nil
	require.Equal(t, "ghcr.io/vmop/vm-runner:v1.2.3", image(vm, render.Options{}))
	require.Equal(t, "mirror.example:5000/vmop/vm-runner:v1.2.3", image(vm, render.Options{ImageRegistry: "mirror.example:5000/vmop"}))
	vm.Spec.Image = &v1.Image{Source: "own.example/runner:1"}
	require.Equal(t, "own.example/runner:1", image(vm, render.Options{ImageRegistry: "mirror.example:5000/vmop"}))
}
