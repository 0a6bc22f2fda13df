package manifest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// roundTrip checks that the YAML written for a JSON value reads back as
// the same value with a real YAML library.
func roundTrip(t *testing.T, in []byte) {
	t.Helper()
	out, err := JSONToYAML(nil, in)
	if err != nil {
		t.Fatalf("JSONToYAML(%s): %v", in, err)
	}
	back, err := yaml.YAMLToJSON(out)
	if err != nil {
		t.Fatalf("the YAML does not parse: %v\n%s", err, out)
	}
	var want, got any
	if err := json.Unmarshal(in, &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(back, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("the YAML reads back differently (-want +got):\n%s\nYAML:\n%s", cmp.Diff(want, got), out)
	}
}

func TestJSONToYAMLRoundTrip(t *testing.T) {
	for _, in := range jsonSeeds {
		roundTrip(t, []byte(in))
	}
}

var jsonSeeds = []string{
	`{}`, `[]`, `"x"`, `1`, `null`, `true`,
	`{"a":{"b":[1,2,{"c":"d","e":[]}],"f":{}},"g":[[1,[2]],[]]}`,
	`{"y":"n","yes":"no","on":"off","Null":"~","t":"true","num":"0x1F","oct":"0777","f":"1.5","e":"1e3","date":"2001-12-14"}`,
	`{"q":"40Gi","m":"500m","u":"12:30","sp":" lead","tr":"trail ","colon":"a: b","hash":"a #b","dash":"- x","star":"*ref","amp":"&a"}`,
	`{"multi":"line one\nline two\n","noeol":"a\nb","blank":"a\n\nb\n","trailing":"a\n\n","lead":" a\nb\n","tab":"a\tb\nc\n"}`,
	`{"esc":"\u003chtml\u003e \u0026 \"q\" \\ \/","uni":"é ü 日本","ctrl":"\u0001","ls":"\u2028"}`,
	`{"config.yaml":"/Runner:\n  vm:\n    name: x\n","list":[{"a":1,"b":[{"c":2}]},"s",["t"]]}`,
	`{"app.kubernetes.io/name":"vm-runner","":"empty key","k":""}`,
	`[{"a":"|"},{">":"x"},{"k":"-"},{"k":"?"},{"k":":"},{"k":"@x"},{"k":"%x"},{"k":"` + "`" + `x"}]`,
	`{"big":12345678901234567890,"neg":-1.5e-7,"zero":0}`,
}

func TestJSONToYAMLExamples(t *testing.T) {
	// Everything kubectl vm render prints goes through JSONToYAML.
	files, _ := filepath.Glob("../../examples/*.yaml")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := NewReader(bytes.NewReader(data))
		for {
			d, err := r.Next()
			if err != nil {
				break
			}
			roundTrip(t, d.JSON)
		}
	}
}

func FuzzJSONToYAML(f *testing.F) {
	for _, s := range append(jsonSeeds, hostileJSON...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			if _, err := JSONToYAML(nil, in); err == nil {
				t.Fatalf("invalid JSON accepted: %q", in)
			}
			return
		}
		var v any
		if err := json.Unmarshal(in, &v); err != nil {
			return
		}
		// Compare against a canonical form: numbers beyond float64 and
		// duplicate keys are outside what manifests carry.
		canon, err := json.Marshal(v)
		if err != nil {
			return
		}
		roundTrip(t, canon)
	})
}
