package render_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/golden"
)

// Golden cases live in testdata/<case>/input.yaml. A case named "error-*"
// must fail and has errors.txt (Problem.String() lines); any other case has
// expected.yaml (the YAML output) and, when there are warnings,
// warnings.txt. Run "go test ./pkg/render -run Golden -update" to rewrite
// them.

// caseOptions are the StreamOptions of cases that need any.
var caseOptions = map[string]render.StreamOptions{
	"namespace-option":         {Namespace: "vmop-demo"},
	"display-secret-option":    {Options: render.Options{DisplaySecret: "shared-display-secret"}},
	"service-account-option":   {Options: render.Options{ServiceAccount: "vm-runner"}},
	"error-namespace-mismatch": {Namespace: "other"},
}

const versionFile = "testdata/render-version.txt"

// goldenCases lists the case directories, sorted.
func goldenCases(t *testing.T) []string {
	t.Helper()
	inputs, err := filepath.Glob("testdata/*/input.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, inputs)
	var names []string
	for _, in := range inputs {
		names = append(names, filepath.Base(filepath.Dir(in)))
	}
	return names
}

type streamResult struct {
	out                []byte
	problems, warnings []string
}

// renderCase runs render.Stream over a case's input as the commands do.
func renderCase(t *testing.T, name, format string) streamResult {
	t.Helper()
	in, err := os.ReadFile(filepath.Join("testdata", name, "input.yaml"))
	require.NoError(t, err)
	return renderBytes(t, in, format, caseOptions[name])
}

func renderBytes(t *testing.T, in []byte, format string, opts render.StreamOptions) streamResult {
	t.Helper()
	var res streamResult
	var buf bytes.Buffer
	w, err := manifest.NewWriter(&buf, format)
	require.NoError(t, err)
	opts.Warn = func(p render.Problem) { res.warnings = append(res.warnings, p.String()) }
	problems, err := render.Stream(bytes.NewReader(in), "input.yaml", w, opts)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	for _, p := range problems {
		res.problems = append(res.problems, p.String())
	}
	res.out = buf.Bytes()
	return res
}

func lines(ls []string) []byte {
	if len(ls) == 0 {
		return nil
	}
	return []byte(strings.Join(ls, "\n") + "\n")
}

func TestGolden(t *testing.T) {
	for _, name := range goldenCases(t) {
		if strings.HasPrefix(name, "error-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("testdata", name)
			res := renderCase(t, name, manifest.FormatYAML)
			require.Empty(t, res.problems, "a valid case must render")
			golden.Assert(t, filepath.Join(dir, "expected.yaml"), res.out)
			assertOptional(t, filepath.Join(dir, "warnings.txt"), lines(res.warnings))

			// The YAML must read back as the same objects as the JSON
			// output: this checks the YAML writer on every case.
			js := renderCase(t, name, manifest.FormatJSON)
			var list struct {
				APIVersion, Kind string
				Items            []any
			}
			require.NoError(t, json.Unmarshal(js.out, &list), "-o json must be valid JSON")
			require.Equal(t, "List", list.Kind)
			if diff := cmp.Diff(list.Items, parseYAMLStream(t, res.out)); diff != "" {
				t.Errorf("YAML and JSON output differ (-json +yaml):\n%s", diff)
			}
		})
	}
}

func TestGoldenErrors(t *testing.T) {
	for _, name := range goldenCases(t) {
		if !strings.HasPrefix(name, "error-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			res := renderCase(t, name, manifest.FormatYAML)
			require.NotEmpty(t, res.problems, "an error case must not render")
			golden.Assert(t, filepath.Join("testdata", name, "errors.txt"), lines(res.problems))
		})
	}
}

// TestGoldenErrorsAllAtOnce checks that a stream with several bad VMs
// reports every problem of every document, not just the first.
func TestGoldenErrorsAllAtOnce(t *testing.T) {
	res := renderCase(t, "error-many", manifest.FormatYAML)
	docs := map[string]int{}
	for _, p := range res.problems {
		doc := strings.SplitN(p, ": ", 3)[1]
		docs[doc]++
	}
	require.GreaterOrEqual(t, docs["document 1"], 8, "every problem of the first VM:\n%s", lines(res.problems))
	require.GreaterOrEqual(t, docs["document 3"], 2, "every problem of the second VM:\n%s", lines(res.problems))
	require.Zero(t, docs["document 2"], "the ConfigMap between them is fine")

	// The bad YAML of one document does not hide the others' problems.
	res = renderCase(t, "error-bad-yaml", manifest.FormatYAML)
	var docsSeen []string
	for _, p := range res.problems {
		docsSeen = append(docsSeen, strings.SplitN(p, ": ", 3)[1])
	}
	require.Equal(t, []string{"document 1", "document 2", "document 3"}, docsSeen)
}

// assertOptional is golden.Assert for a file that is absent when empty.
func assertOptional(t *testing.T, path string, got []byte) {
	t.Helper()
	if len(got) == 0 {
		if golden.Update() {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			return
		}
		if want, err := os.ReadFile(path); err == nil {
			t.Errorf("%s expects:\n%s\nbut there is nothing (run with -update if intended)", path, want)
		}
		return
	}
	golden.Assert(t, path, got)
}

// parseYAMLStream reads a YAML stream into generic objects.
func parseYAMLStream(t *testing.T, y []byte) []any {
	t.Helper()
	r := manifest.NewReader(bytes.NewReader(y))
	out := []any{}
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		var obj any
		require.NoError(t, json.Unmarshal(d.JSON, &obj))
		out = append(out, obj)
	}
}

// expectedHash is the sha256 of all expected.yaml files concatenated in
// sorted path order.
func expectedHash(t *testing.T) string {
	t.Helper()
	files, err := filepath.Glob("testdata/*/expected.yaml")
	require.NoError(t, err)
	sum := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		sum.Write(b)
	}
	return hex.EncodeToString(sum.Sum(nil))
}

// TestGoldenVersion guards render.Version: the expected output may only
// change together with it, since the version is part of every render-hash
// and callers rely on the hash to notice changed output. It runs after
// TestGolden so that -update sees the rewritten files.
func TestGoldenVersion(t *testing.T) {
	recorded, err := os.ReadFile(versionFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	write, err := checkVersion(string(recorded), render.Version, expectedHash(t), golden.Update())
	if err != nil {
		t.Fatalf("%s: %v", versionFile, err)
	}
	if write {
		require.NoError(t, os.WriteFile(versionFile, []byte(render.Version+" "+expectedHash(t)+"\n"), 0o644))
	}
}

// checkVersion compares the recorded "<Version> <hash>" with the current
// ones; write tells whether to record the current ones (only with update).
func checkVersion(recorded, version, hash string, update bool) (write bool, err error) {
	var recVersion, recHash string
	if recorded != "" {
		f := strings.Fields(recorded)
		if len(f) != 2 {
			return false, fmt.Errorf("want \"<Version> <sha256>\", got %q", recorded)
		}
		recVersion, recHash = f[0], f[1]
	}
	changed := recHash != "" && recHash != hash
	if update {
		if changed && recVersion == version {
			return false, fmt.Errorf("rendered output changed: bump render.Version (now %q) before recording it with -update", version)
		}
		return recVersion != version || recHash != hash, nil
	}
	switch {
	case recHash == "":
		return false, errors.New("missing: run with -update")
	case changed && recVersion == version:
		return false, errors.New("rendered output changed: bump render.Version and run with -update")
	case recVersion != version:
		return false, fmt.Errorf("render.Version is %q but %q is recorded: run with -update", version, recVersion)
	}
	return false, nil
}

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		name, recorded, version, hash string
		update, write                 bool
		err                           string
	}{
		{name: "unchanged", recorded: "1 aaa\n", version: "1", hash: "aaa"},
		{name: "changed", recorded: "1 aaa\n", version: "1", hash: "bbb", err: "rendered output changed: bump render.Version and run with -update"},
		{name: "changed, update refused", recorded: "1 aaa\n", version: "1", hash: "bbb", update: true, err: "bump render.Version"},
		{name: "bumped", recorded: "1 aaa\n", version: "2", hash: "bbb", err: "run with -update"},
		{name: "bumped, update", recorded: "1 aaa\n", version: "2", hash: "bbb", update: true, write: true},
		{name: "bumped only, update", recorded: "1 aaa\n", version: "2", hash: "aaa", update: true, write: true},
		{name: "unchanged, update", recorded: "1 aaa\n", version: "1", hash: "aaa", update: true},
		{name: "missing", version: "1", hash: "aaa", err: "missing"},
		{name: "missing, update", version: "1", hash: "aaa", update: true, write: true},
		{name: "garbage", recorded: "1\n", version: "1", hash: "aaa", err: "want"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			write, err := checkVersion(tc.recorded, tc.version, tc.hash, tc.update)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.write, write)
		})
	}
}

// goldenVMDocs are the VirtualMachine documents (JSON) of the valid
// golden cases' inputs, by case.
func goldenVMDocs(t *testing.T) map[string][][]byte {
	t.Helper()
	docs := map[string][][]byte{}
	for _, name := range goldenCases(t) {
		if strings.HasPrefix(name, "error-") {
			continue
		}
		in, err := os.ReadFile(filepath.Join("testdata", name, "input.yaml"))
		require.NoError(t, err)
		r := manifest.NewReader(bytes.NewReader(in))
		for {
			d, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err)
			if v1.IsVirtualMachine(d.APIVersion, d.Kind) {
				docs[name] = append(docs[name], d.JSON)
			}
		}
	}
	return docs
}

// TestGoldenCoversSpec fails when a field of VirtualMachineSpec appears in
// no valid golden case, so that a new field comes with a case.
func TestGoldenCoversSpec(t *testing.T) {
	want := map[string]bool{}
	specFields(reflect.TypeFor[v1.VirtualMachineSpec](), "spec", want)

	have := map[string]bool{}
	for _, docs := range goldenVMDocs(t) {
		for _, doc := range docs {
			var obj map[string]any
			require.NoError(t, json.Unmarshal(doc, &obj))
			valuePaths(obj["spec"], "spec", have)
		}
	}
	var missing []string
	for p := range want {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	slices.Sort(missing)
	require.Empty(t, missing, "fields in no golden case")
}

// specFields collects the JSON paths of the fields of t, down into the
// types of package v1; other types (corev1's, Quantity) are leaves.
func specFields(t reflect.Type, prefix string, out map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() != reflect.TypeFor[v1.VirtualMachine]().PkgPath() || t == reflect.TypeFor[v1.FreeForm]() {
		return
	}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		p := prefix + "." + name
		out[p] = true
		specFields(f.Type, p, out)
	}
}

// valuePaths collects the paths of all keys in a decoded JSON value; list
// items share their list's path.
func valuePaths(v any, prefix string, out map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out[prefix+"."+k] = true
			valuePaths(e, prefix+"."+k, out)
		}
	case []any:
		for _, e := range v {
			valuePaths(e, prefix, out)
		}
	}
}

// TestRunnerConfig checks that RunnerConfig, which kubectl vm list uses
// instead of rendering, gives every valid case's VM the config the runner
// reads from its rendered ConfigMap.
func TestRunnerConfig(t *testing.T) {
	for _, name := range goldenCases(t) {
		if strings.HasPrefix(name, "error-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			in, err := os.ReadFile(filepath.Join("testdata", name, "input.yaml"))
			require.NoError(t, err)
			dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(in), 4096)
			for {
				var doc map[string]any
				if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
					break
				} else {
					require.NoError(t, err)
				}
				if doc["apiVersion"] != v1.APIVersion || doc["kind"] != "VirtualMachine" {
					continue
				}
				js, err := json.Marshal(doc)
				require.NoError(t, err)
				vm, err := v1.DecodeJSON(js)
				require.NoError(t, err)
				opts := caseOptions[name].Options
				objs, err := render.Render(vm, opts)
				require.NoError(t, err)
				want, err := runnerconfig.Parse([]byte(objs.ConfigMap.Data[vmpod.ConfigFile]))
				require.NoError(t, err)
				got, err := render.RunnerConfig(vm, opts)
				require.NoError(t, err)
				require.Equal(t, want, got, "VM %s", vm.Name)
			}
		})
	}
}
