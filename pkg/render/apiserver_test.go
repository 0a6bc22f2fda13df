package render_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/vmtest"
)

// applyManager is the operator's field manager, so that the dry runs see
// the same field ownership as the operator's real applies.
const applyManager = "vm-operator"

// TestRenderOnAPIServer checks rendered output against a real
// kube-apiserver: every example and golden VM is accepted by the CRD, every
// object rendered from it by the built-in validation, applying twice
// changes nothing, and each error case is caught by the schema or by Go.
// One cluster serves all subtests; it takes seconds to start.
func TestRenderOnAPIServer(t *testing.T) {
	c := vmtest.NewCluster(t)
	ctx := t.Context()
	env := newAPIEnv(t, c.Config)

	examples, err := filepath.Glob(filepath.Join("..", "..", "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, examples)

	var candidates []renderedVM
	t.Run("examples", func(t *testing.T) {
		for _, path := range examples {
			name := strings.TrimSuffix(filepath.Base(path), ".yaml")
			t.Run(name, func(t *testing.T) {
				// Own namespace per file: two examples define vmop-demo/test-vm.
				ns := env.namespaceFor(t, ctx, "example-"+name)
				vms := env.applyFile(t, ctx, path, ns, render.Options{}, true)
				candidates = append(candidates, vms...)
			})
		}
	})

	t.Run("golden", func(t *testing.T) {
		cases := apiGoldenCases(t, "expected.yaml")
		require.NotEmpty(t, cases, "no golden case (testdata/*/expected.yaml): nothing would be checked")
		for _, name := range cases {
			t.Run(name, func(t *testing.T) {
				ns := env.namespaceFor(t, ctx, "golden-"+name)
				// Only the VMs: the other documents of golden inputs test
				// the pass-through, not objects meant for a cluster.
				env.applyFile(t, ctx, filepath.Join("testdata", name, "input.yaml"), ns, caseOptions[name].Options, false)
			})
		}
	})

	t.Run("apply is idempotent", func(t *testing.T) {
		// The VM with most objects exercises most kinds.
		require.NotEmpty(t, candidates, "no example rendered")
		vm := candidates[0]
		for _, cand := range candidates[1:] {
			if len(cand.objs.List()) > len(vm.objs.List()) {
				vm = cand
			}
		}
		t.Logf("applying %s/%s (%d objects)", vm.namespace, vm.name, len(vm.objs.List()))
		env.checkIdempotentApply(t, ctx, vm)
	})

	t.Run("errors are caught by the schema or by render", func(t *testing.T) {
		cases := apiGoldenCases(t, "errors.txt")
		require.NotEmpty(t, cases, "no golden error case (testdata/*/errors.txt): nothing would be checked")
		checked := 0
		for _, name := range cases {
			t.Run(name, func(t *testing.T) {
				checked += env.checkErrorCase(t, ctx, name)
			})
		}
		require.NotZero(t, checked, "no error case has a parseable VirtualMachine with an error: the API server checked nothing")
	})
}

// apiEnv holds the clients of the test cluster.
type apiEnv struct {
	dyn      dynamic.Interface
	mapper   meta.RESTMapper
	warnings *warningRecorder
	// namespaces are those created so far, to keep them apart per file.
	namespaces map[string]bool
}

func newAPIEnv(t *testing.T, cfg *rest.Config) *apiEnv {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	w := &warningRecorder{}
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	// Created after InstallCRD, so the first lookup already sees the CRD.
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return &apiEnv{dyn: dyn, mapper: mapper, warnings: w, namespaces: map[string]bool{}}
}

// warningRecorder collects the apiserver's warnings, which would otherwise
// only go to the log.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, msg string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, msg)
}

func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	msgs := w.msgs
	w.msgs = nil
	return msgs
}

// renderedVM is a VM as created in the cluster and what it rendered to.
type renderedVM struct {
	namespace, name string
	objs            *render.Objects
}

// resource maps gvk through discovery; namespaced tells whether the
// namespace applies.
func (e *apiEnv) resource(t *testing.T, gvk schema.GroupVersionKind, namespace string) (ri dynamic.ResourceInterface, namespaced bool) {
	t.Helper()
	m, err := e.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	require.NoError(t, err, "map %s", gvk)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return e.dyn.Resource(m.Resource).Namespace(namespace), true
	}
	return e.dyn.Resource(m.Resource), false
}

// namespaceFor creates a namespace named after key, unique in this test.
func (e *apiEnv) namespaceFor(t *testing.T, ctx context.Context, key string) string {
	t.Helper()
	ns := dnsLabel(key)
	require.False(t, e.namespaces[ns], "namespace %s used twice", ns)
	e.namespaces[ns] = true
	nsClient, _ := e.resource(t, corev1.SchemeGroupVersion.WithKind("Namespace"), "")
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("Namespace")
	obj.SetName(ns)
	if _, err := nsClient.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		require.NoError(t, err, "create namespace %s", ns)
	}
	return ns
}

// dnsLabel turns s into a valid namespace name.
func dnsLabel(s string) string {
	b := []byte(strings.ToLower(s))
	for i, c := range b {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			b[i] = '-'
		}
	}
	return strings.Trim(string(b[:min(len(b), 63)]), "-")
}

// applyFile creates each VirtualMachine of the file in ns through the CRD,
// renders it and dry-run applies every rendered object; with others, the
// file's other documents are dry-run applied too.
func (e *apiEnv) applyFile(t *testing.T, ctx context.Context, path, ns string, opts render.Options, others bool) []renderedVM {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var out []renderedVM
	r := manifest.NewReader(bytes.NewReader(data))
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err, "%s", path)
		if !v1.IsVirtualMachine(d.APIVersion, d.Kind) {
			if !others {
				t.Logf("document %d: %s %s not applied", d.Index, d.APIVersion, d.Kind)
				continue
			}
			obj := decodeUnstructured(t, d.JSON)
			ri, namespaced := e.resource(t, obj.GroupVersionKind(), ns)
			if namespaced {
				obj.SetNamespace(ns)
			}
			e.apply(t, ctx, ri, obj, true)
			continue
		}

		obj := decodeUnstructured(t, d.JSON)
		obj.SetNamespace(ns)
		vms, _ := e.resource(t, obj.GroupVersionKind(), ns)
		_, err = vms.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
		if !assertNoError(t, err, "document %d: create VirtualMachine %s", d.Index, obj.GetName()) {
			continue
		}
		if w := e.warnings.take(); len(w) > 0 {
			t.Logf("VirtualMachine %s: warnings: %q", obj.GetName(), w)
		}

		// Rendered after the namespace changed, as the operator would.
		vm, err := v1.DecodeJSON(d.JSON)
		require.NoError(t, err)
		vm.Namespace = ns
		objs, err := render.Render(vm, opts)
		require.NoError(t, err, "render %s", vm.Name)
		for _, o := range objs.List() {
			u := toUnstructured(t, o)
			ri, _ := e.resource(t, u.GroupVersionKind(), ns)
			e.apply(t, ctx, ri, u, true)
		}
		out = append(out, renderedVM{namespace: ns, name: vm.Name, objs: objs})
	}
}

// apply server-side applies obj as the operator does. A rejection is an
// error of the test, not a stop: each rejected object is reported.
func (e *apiEnv) apply(t *testing.T, ctx context.Context, ri dynamic.ResourceInterface, obj *unstructured.Unstructured, dryRun bool) *unstructured.Unstructured {
	t.Helper()
	opts := metav1.ApplyOptions{FieldManager: applyManager, Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	got, err := ri.Apply(ctx, obj.GetName(), obj, opts)
	what := fmt.Sprintf("%s %s/%s", obj.GetKind(), obj.GetNamespace(), obj.GetName())
	if !assertNoError(t, err, "apply %s", what) {
		return nil
	}
	// The apiserver warns about fields it ignores or will stop accepting:
	// in rendered output that is a bug too.
	if w := e.warnings.take(); len(w) > 0 {
		t.Errorf("apply %s: warnings: %q", what, w)
	}
	return got
}

func assertNoError(t *testing.T, err error, format string, args ...any) bool {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", fmt.Sprintf(format, args...), err)
		return false
	}
	return true
}

// checkIdempotentApply applies vm's objects for real twice: the second
// apply must be a no-op for the apiserver, or the operator would write on
// every resync.
func (e *apiEnv) checkIdempotentApply(t *testing.T, ctx context.Context, vm renderedVM) {
	type applied struct {
		ri                  dynamic.ResourceInterface
		kind, name, version string
	}
	var first []applied
	for _, o := range vm.objs.List() {
		u := toUnstructured(t, o)
		ri, _ := e.resource(t, u.GroupVersionKind(), vm.namespace)
		got := e.apply(t, ctx, ri, u, false)
		require.NotNil(t, got, "apply %s %s", u.GetKind(), u.GetName())
		first = append(first, applied{ri, u.GetKind(), u.GetName(), got.GetResourceVersion()})
	}
	for i, o := range vm.objs.List() {
		u := toUnstructured(t, o)
		got := e.apply(t, ctx, first[i].ri, u, false)
		require.NotNil(t, got)
		require.Equal(t, first[i].version, got.GetResourceVersion(), "re-applying %s %s changed it", first[i].kind, first[i].name)
	}
	for _, a := range first {
		got, err := a.ri.Get(ctx, a.name, metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, a.version, got.GetResourceVersion(), "%s %s changed after the applies", a.kind, a.name)
	}

	// What matters most must have survived defaulting unchanged.
	want := vm.objs.StatefulSet
	u, err := first[slices.IndexFunc(first, func(a applied) bool { return a.kind == "StatefulSet" })].ri.Get(ctx, want.Name, metav1.GetOptions{})
	require.NoError(t, err)
	var got appsv1.StatefulSet
	require.NoError(t, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &got))
	require.Equal(t, appsv1.OnDeleteStatefulSetStrategyType, got.Spec.UpdateStrategy.Type)
	require.NotEmpty(t, want.Annotations[render.AnnotationHash])
	require.Equal(t, want.Annotations[render.AnnotationHash], got.Annotations[render.AnnotationHash])
	require.Len(t, got.Spec.VolumeClaimTemplates, len(want.Spec.VolumeClaimTemplates))
	for i, w := range want.Spec.VolumeClaimTemplates {
		g := got.Spec.VolumeClaimTemplates[i]
		require.Equal(t, w.Name, g.Name)
		require.Equal(t, w.Labels, g.Labels, "template %s", w.Name)
		require.Equal(t, w.Spec.AccessModes, g.Spec.AccessModes, "template %s", w.Name)
		require.Equal(t, w.Spec.VolumeMode, g.Spec.VolumeMode, "template %s", w.Name)
		require.Equal(t, w.Spec.StorageClassName, g.Spec.StorageClassName, "template %s", w.Name)
		require.Equal(t, w.Spec.Selector, g.Spec.Selector, "template %s", w.Name)
		require.True(t, equalResources(w.Spec.Resources.Requests, g.Spec.Resources.Requests), "template %s: requests %v, stored %v", w.Name, w.Spec.Resources.Requests, g.Spec.Resources.Requests)
	}
}

// equalResources compares quantities by value: the apiserver may store
// another form of the same number.
func equalResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		if p, ok := b[k]; !ok || q.Cmp(p) != 0 {
			return false
		}
	}
	return true
}

// documentRE finds the documents that an errors.txt line is about.
var documentRE = regexp.MustCompile(`(?m)^[^:\n]*: document (\d+): `)

// checkErrorCase wants every bad VirtualMachine of an error case refused
// by the CRD schema when creating it, or else by render; it logs which,
// to document what the schema can see and what only Go validation can.
// It returns how many VirtualMachines it checked: a case whose errors are
// all in other documents, or unparseable ones, has none for the API server.
func (e *apiEnv) checkErrorCase(t *testing.T, ctx context.Context, name string) int {
	dir := filepath.Join("testdata", name)
	errs, err := os.ReadFile(filepath.Join(dir, "errors.txt"))
	require.NoError(t, err)
	bad := map[int]bool{}
	for _, m := range documentRE.FindAllStringSubmatch(string(errs), -1) {
		n, _ := strconv.Atoi(m[1])
		bad[n] = true
	}
	data, err := os.ReadFile(filepath.Join(dir, "input.yaml"))
	require.NoError(t, err)

	ns := e.namespaceFor(t, ctx, "error-case-"+name)
	checked := 0
	r := manifest.NewReader(bytes.NewReader(data))
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.False(t, d == nil && err != nil, "%s: %v", name, err)
		switch {
		case len(bad) > 0 && !bad[d.Index]:
			continue
		case err != nil:
			t.Logf("document %d: skipped, not parseable: %v", d.Index, err)
			continue
		case !v1.IsVirtualMachine(d.APIVersion, d.Kind):
			t.Logf("document %d: skipped, not a VirtualMachine", d.Index)
			continue
		}
		checked++

		obj := decodeUnstructured(t, d.JSON)
		obj.SetNamespace(ns)
		vms, _ := e.resource(t, obj.GroupVersionKind(), ns)
		_, schemaErr := vms.Create(ctx, obj, metav1.CreateOptions{FieldValidation: metav1.FieldValidationStrict})
		if schemaErr == nil {
			require.NoError(t, vms.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}))
		} else {
			require.True(t, apierrors.IsInvalid(schemaErr) || apierrors.IsBadRequest(schemaErr),
				"document %d: want a validation error, got %v", d.Index, schemaErr)
		}
		e.warnings.take()

		// As the golden test renders it, with the case's options.
		_, problems, _ := render.FromJSON(d.JSON, caseOptions[name])

		var by []string
		if schemaErr != nil {
			by = append(by, "schema")
		}
		if len(problems) > 0 {
			by = append(by, "render")
		}
		if len(by) == 0 {
			t.Errorf("document %d (%s): neither the schema nor render rejects it", d.Index, obj.GetName())
			continue
		}
		t.Logf("document %d (%s): caught by %s", d.Index, obj.GetName(), strings.Join(by, " and "))
		if schemaErr != nil {
			t.Logf("  schema: %v", schemaErr)
		}
		for _, p := range problems {
			t.Logf("  render: %s", strings.TrimPrefix(p.Field+": "+p.Message, ": "))
		}
	}
	if checked == 0 {
		t.Log("no parseable VirtualMachine with an error: render's golden test alone covers this case")
	}
	return checked
}

// decodeUnstructured decodes as the API machinery does (integers as
// int64).
func decodeUnstructured(t *testing.T, data []byte) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	require.NoError(t, utiljson.Unmarshal(data, &m))
	return &unstructured.Unstructured{Object: m}
}

func toUnstructured(t *testing.T, o runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
	require.NoError(t, err)
	u := &unstructured.Unstructured{Object: m}
	require.NotEmpty(t, u.GetKind(), "rendered %T without kind", o)
	return u
}

// apiGoldenCases lists the golden case directories holding marker
// (expected.yaml for valid cases, errors.txt for error cases).
func apiGoldenCases(t *testing.T, marker string) []string {
	t.Helper()
	inputs, err := filepath.Glob(filepath.Join("testdata", "*", "input.yaml"))
	require.NoError(t, err)
	var names []string
	for _, in := range inputs {
		dir := filepath.Dir(in)
		if _, err := os.Stat(filepath.Join(dir, marker)); err != nil {
			continue
		}
		// A valid case must not also be an error case.
		if _, err := os.Stat(filepath.Join(dir, "errors.txt")); marker != "errors.txt" && err == nil {
			continue
		}
		names = append(names, filepath.Base(dir))
	}
	return names
}
