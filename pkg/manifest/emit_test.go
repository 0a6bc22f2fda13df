package manifest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// emitSamples are strings at the edges of what the emitter writes itself.
var emitSamples = []string{
	"vm-1", "8Gi", "2", "-2", "", "true", "y", "yes", "Off", "null", "~", "name", "1e3", "1.", ".5", ".inf", "+.Inf",
	"0x1F", "0o17", "0b101", "-0b101", "1_000", "00", "1e999", "99999999999999999999", "2001-12-14", "1:20",
	"ghcr.io/vmop/vm-runner:1.0", "a: b", "a:", "a:b", "-x", "--live", "- x", "-", "?", "? x", "#a", "a #b", "a#b",
	"---x", "...", "@a", "%a", "'a", `a"b`, `a\b`, "<<", "a b", "a  b", " lead", "trail ", "tab\tx", "ünï", "a,b[c]",
	strings.Repeat("word ", 20), strings.Repeat("x", 100),
	"line\nline\n", "line\nline", "line\n\nx\n", "x\n", "\n", "a\n\n", "\nx", " x\ny", "x \ny", "x\n y", "x\r\ny",
	"disk-10", "disk-9", "a_b", "aB", "a01", "a1", "a/b", "A",
}

// emitPlaces puts s at the places a string has in a manifest: values and
// keys of mappings, items of sequences, at several depths.
func emitPlaces(s, key string, depth int) any {
	v := any(map[string]any{
		key: s, "k" + key: []any{s, map[string]any{key: s, "k": []any{s}}, map[string]any{}, []any{}},
		"empty": map[string]any{}, "n": 1, "t": true, "z": nil,
	})
	for range depth % 4 {
		v = map[string]any{"a": v, "b": []any{v}}
	}
	return v
}

// checkEmit checks that the emitter writes what yaml.v2 writes for js, or
// declines, and tells whether it wrote.
func checkEmit(t *testing.T, js []byte) bool {
	t.Helper()
	want, werr := yamlV2(js, false)
	var e emitter
	e.js.Write(js)
	got, ok := e.emit(false)
	if !ok {
		return false
	}
	if werr != nil {
		t.Fatalf("yaml.v2 fails (%v) where the emitter writes\n%s", werr, got)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Fatalf("the emitter writes other YAML than yaml.v2 for %s (-yaml.v2 +emitter):\n%s", js, diff)
	}
	return true
}

func TestEmitterWritesManifests(t *testing.T) {
	for _, s := range []string{"vm-1", "8Gi", "2", "", "name", "--live", "line\nline\n"} {
		js, err := json.Marshal(emitPlaces(s, "key", 2))
		if err != nil {
			t.Fatal(err)
		}
		if !checkEmit(t, js) {
			t.Errorf("the emitter leaves %q to yaml.v2", s)
		}
	}
}

// FuzzEmitter checks that the emitter writes byte for byte what yaml.v2
// writes, or declines: for strings as keys, values and items at several
// depths, and for any JSON.
func FuzzEmitter(f *testing.F) {
	for _, s := range emitSamples {
		f.Add(s, "key", uint8(1), []byte(nil))
		f.Add("x", s, uint8(2), []byte(nil))
	}
	f.Add("x", "disk-10", uint8(0), []byte(`{"disk-9":1,"disk-10":[1.5,-0,1e2,{"a":[[1]]}],"a_b":"","aB":null}`))
	f.Fuzz(func(t *testing.T, s, key string, depth uint8, js []byte) {
		v, err := json.Marshal(emitPlaces(s, key, int(depth)))
		if err != nil {
			t.Fatal(err)
		}
		checkEmit(t, v)
		if json.Valid(js) {
			checkEmit(t, js)
		}
	})
}
