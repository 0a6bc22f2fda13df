package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// decode reads JSON with numbers as int64 where they are integers, else
// float64, so that 1.5e-07 and 1.5e-7 compare equal but large integers
// keep every digit.
func decode(t *testing.T, js []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		t.Fatalf("%v: %s", err, js)
	}
	return numbers(v)
}

func numbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64() // valid: the decoder checked it
		return f
	case map[string]any:
		for k, e := range v {
			v[k] = numbers(e)
		}
	case []any:
		for i, e := range v {
			v[i] = numbers(e)
		}
	}
	return v
}

// sameAsJSON checks that the YAML a Writer writes for obj reads back, with
// the Reader, as encoding/json's form of obj without its status.
func sameAsJSON(t *testing.T, obj any) {
	t.Helper()
	want, jerr := json.Marshal(obj)
	var buf bytes.Buffer
	w, err := NewWriter(&buf, FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	if werr := w.WriteObject(obj); (werr == nil) != (jerr == nil) {
		t.Fatalf("the Writer gives %v, encoding/json %v", werr, jerr)
	}
	if jerr != nil {
		return
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := NewReader(&buf).Next()
	if err != nil {
		t.Fatalf("the YAML does not read back: %v\n%s", err, buf.Bytes())
	}
	wantV := decode(t, want).(map[string]any)
	delete(wantV, "status")
	if diff := cmp.Diff(wantV, decode(t, d.JSON)); diff != "" {
		t.Errorf("the YAML reads back differently from encoding/json (-json +yaml):\n%s\nYAML:\n%s", diff, d.Raw)
	}
}

// byPointer marshals itself only through a pointer: encoding/json calls
// it for an addressable value (a field of a struct reached by pointer).
type byPointer struct{ N int }

func (p *byPointer) MarshalJSON() ([]byte, error) { return json.Marshal(fmt.Sprintf("n=%d", p.N)) }

type tagged struct {
	Name string `json:"Name"`
}
type untagged struct {
	Name string // the same name at the same depth: the tagged one wins
}

// tricky holds what encoding/json does beyond plain fields, so that the
// YAML written for structs is checked, not only for maps.
type tricky struct {
	tagged
	untagged
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Count      int64                   `json:"count,string"`
	Flag       bool                    `json:"flag,string,omitempty"`
	Ptr        byPointer               `json:"ptr"`
	Skipped    string                  `json:"-"`
	Dash       string                  `json:"-,"` //nolint:staticcheck // the field named "-", on purpose
	NoTag      uint64                  //
	Float      float64                 `json:"float"`
	Bytes      []byte                  `json:"bytes"`
	NilSlice   []string                `json:"nilSlice"`
	Map        map[string]any          `json:"map,omitempty"`
	Quantity   resource.Quantity       `json:"quantity"`
	Port       intstr.IntOrString      `json:"port"`
	Time       metav1.Time             `json:"time,omitzero"`
	Nested     [][]int                 `json:"nested"`
	Labels     map[string]string       `json:"labels"`
	Status     map[string]string       `json:"status"`
	Embedded   *corev1.ObjectReference `json:"ref,omitempty"`
}

func TestWriterYAMLMatchesJSON(t *testing.T) {
	sameAsJSON(t, &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"z": "1", "a": "yes", "o": "0777", "m": "52:54:00:12:34:56"}, CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0).UTC())},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name: "c", Command: []string{"sh", "-c", "echo 'a: b'\nexit 1\n", "--disk", "- x", "#c", "~", "null", "1e3"},
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
						corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("3276Mi"),
					}},
					Ports:          []corev1.ContainerPort{{Name: "spice", ContainerPort: 5900}},
					LivenessProbe:  &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Port: intstr.FromString("http")}}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(80)}}},
				}},
				SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: ptr.To(false)},
			}},
		},
		Status: appsv1.StatefulSetStatus{Replicas: 3},
	})
	sameAsJSON(t, &corev1.Secret{Data: map[string][]byte{"user-data": []byte("#cloud-config\n"), "empty": {}}})
	sameAsJSON(t, &tricky{
		tagged: tagged{"tagged"}, untagged: untagged{"untagged"}, APIVersion: "v1", Kind: "Tricky",
		Count: math.MaxInt64, Flag: true, Ptr: byPointer{7}, Skipped: "x", Dash: "-", NoTag: math.MaxUint64,
		Float: 1.5e-7, Bytes: []byte{0, 1, 2}, Map: map[string]any{"k": []any{1.0, "2", nil, true}, "": "empty key"},
		Quantity: resource.MustParse("40Gi"), Port: intstr.FromString("8080"), Time: metav1.NewTime(time.Unix(1, 0).UTC()),
		Nested: [][]int{{1}, {}, nil}, Labels: map[string]string{"y": "n", "on": "off"}, Status: map[string]string{"phase": "x"},
		Embedded: &corev1.ObjectReference{Name: "ref"},
	})
}

// FuzzWriterYAML checks the YAML written for typed objects (not only
// maps) against encoding/json: strings that YAML could read as something
// else, numbers at their limits, bytes.
func FuzzWriterYAML(f *testing.F) {
	for _, s := range []string{"", "yes", "0777", "1e3", "52:54:00:12:34:56", "a: b", "- x", "line\nline\n", " lead", "\ufeff", "\x00", "\xff", "~", "!x", "&a", "*a", "{", "\"'"} {
		f.Add(s, int64(-1), 0.5, []byte(s))
	}
	f.Add("big", int64(math.MinInt64), math.MaxFloat64, []byte(nil))
	f.Fuzz(func(t *testing.T, s string, i int64, fl float64, b []byte) {
		sameAsJSON(t, &tricky{
			tagged: tagged{s}, untagged: untagged{s + "x"}, APIVersion: "v1", Kind: s,
			Count: i, Flag: i%2 == 0, Ptr: byPointer{int(i)}, NoTag: uint64(i), Float: fl, Bytes: b,
			Map: map[string]any{s: s, "n": i, "f": fl}, Labels: map[string]string{s: s}, Nested: [][]int{{int(i)}},
			Quantity: *resource.NewQuantity(i, resource.BinarySI), Port: intstr.FromString(s),
		})
	})
}

// TestWriterYAMLExamples writes every document of the examples as YAML
// and reads it back.
func TestWriterYAMLExamples(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(bytes.NewReader(data))
		for {
			d, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj map[string]any
			if err := json.Unmarshal(d.JSON, &obj); err != nil {
				t.Fatal(err)
			}
			sameAsJSON(t, obj)
			docs++
		}
	}
	if len(files) < 3 || docs < len(files) {
		t.Fatalf("%d documents in %d files: the examples moved?", docs, len(files))
	}
}

// FuzzReader feeds streams of user YAML to the Reader: every document
// gives an object with its type or a one-line error naming it, never a
// panic.
func FuzzReader(f *testing.F) {
	for _, c := range hostileYAML {
		if len(c.in) <= 4<<10 { // the 100k nestings would slow every round
			f.Add([]byte(c.in))
		}
	}
	files, err := filepath.Glob("../../examples/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no examples: %v", err)
	}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("---\napiVersion: v1\nkind: A\n---\n--- # c\n\ufeffkind: B\n...\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := NewReader(bytes.NewReader(in))
		for n := 0; ; n++ {
			if n > len(in) {
				t.Fatalf("more documents than bytes: %q", in)
			}
			d, err := r.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				if strings.Contains(err.Error(), "\n") {
					t.Fatalf("the error is not one line: %q; input: %q", err, in)
				}
				if d != nil && !strings.HasPrefix(err.Error(), fmt.Sprintf("document %d: ", d.Index)) {
					t.Fatalf("the error does not name document %d: %q", d.Index, err)
				}
				continue
			}
			var obj map[string]any
			if err := json.Unmarshal(d.JSON, &obj); err != nil {
				t.Fatalf("document %d: not a JSON object: %v: %s", d.Index, err, d.JSON)
			}
			if k, _ := obj["kind"].(string); k != d.Kind {
				t.Fatalf("document %d: Kind %q, but the object's kind is %v", d.Index, d.Kind, obj["kind"])
			}
		}
	})
}
