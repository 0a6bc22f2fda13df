package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// YAMLToJSON converts one YAML document of at most MaxDocumentSize bytes
// to JSON with sigs.k8s.io/yaml's strict mode, as kubectl decodes: a
// duplicate key is an error, not a silent last-wins. So is a document
// that aliases expand beyond MaxDocumentSize. A leading UTF-8 byte order
// mark is ignored. Errors are one line.
func YAMLToJSON(doc []byte) ([]byte, error) {
	if len(doc) > MaxDocumentSize {
		return nil, tooLarge(MaxDocumentSize)
	}
	doc = bytes.TrimPrefix(doc, utf8BOM)
	if bytes.IndexByte(doc, '&') >= 0 { // anchors: there may be aliases
		if err := checkAliases(doc); err != nil {
			return nil, err
		}
	}
	out, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, yamlError(doc, err)
	}
	return out, nil
}

// checkAliases refuses a document whose aliases expand it beyond
// MaxDocumentSize. yaml.v2 bounds the number of nodes aliases add, not
// their size: a few KiB of aliases to one long string would make GBs of
// JSON. Decoding costs what the conversion does, and shares the strings.
func checkAliases(doc []byte) error {
	var v any
	if yamlv2.Unmarshal(doc, &v) != nil {
		return nil //nolint:nilerr // the conversion reports it
	}
	if jsonSize(v, MaxDocumentSize) > MaxDocumentSize {
		return fmt.Errorf("aliases make the document %w", tooLarge(MaxDocumentSize))
	}
	return nil
}

// jsonSize estimates the size of a decoded YAML value as JSON, stopping
// soon after it passes limit.
func jsonSize(v any, limit int) int {
	n := 2 // quotes or brackets
	switch v := v.(type) {
	case string:
		return n + len(v)
	case []any:
		for _, e := range v {
			if n += jsonSize(e, limit-n) + 1; n > limit {
				break
			}
		}
		return n
	case map[any]any:
		for k, e := range v {
			if n += jsonSize(k, limit-n) + jsonSize(e, limit-n) + 2; n > limit {
				break
			}
		}
		return n
	}
	return 8 // a number, boolean or null
}

// yamlError names the line of invalid UTF-8, which yaml.v2 does not, and
// puts yaml.v2's list of decoding errors on one line.
func yamlError(doc []byte, err error) error {
	if bad := CheckUTF8(doc); bad != nil {
		return bad
	}
	var te *yamlv2.TypeError
	if errors.As(err, &te) {
		return fmt.Errorf("yaml: %s", strings.Join(te.Errors, "; "))
	}
	return err
}

// CheckUTF8 returns an error naming the first line of data that is not
// valid UTF-8, or nil.
func CheckUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	n := 1
	for line := range bytes.Lines(data) {
		if !utf8.Valid(line) {
			break
		}
		n++
	}
	return fmt.Errorf("line %d: invalid UTF-8", n)
}

// manifestJSON returns a Kubernetes object (typed, or a map) as a
// manifest in encoding/json's form: without its top-level status, which
// only a cluster writes (typed objects always carry one, e.g. a
// StatefulSet's "replicas: 0").
func manifestJSON(obj any) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return b, nil //nolint:nilerr // not an object: nothing to drop
	}
	delete(fields, "status")
	return json.Marshal(fields) // with sorted keys, as in YAML
}

// YAML returns a Kubernetes object as a manifest (no status) in YAML.
func YAML(obj any) ([]byte, error) { return toYAML(obj, true) }

// Marshal returns a Go value in YAML as kubectl prints it (sorted keys,
// sequences at their key's indent): its encoding/json form written as
// yaml.v2 writes it, as sigs.k8s.io/yaml.Marshal does.
func Marshal(obj any) ([]byte, error) { return toYAML(obj, false) }

// emitters keep their buffers for the next object.
var emitters = sync.Pool{New: func() any { return new(emitter) }}

func toYAML(obj any, manifest bool) ([]byte, error) {
	e := emitters.Get().(*emitter)
	defer emitters.Put(e)
	y, err := e.marshal(obj, manifest)
	return bytes.Clone(y), err
}

// yamlV2 writes JSON as yaml.v2 does. It decodes the JSON with
// encoding/json, not as YAML as sigs.k8s.io/yaml.Marshal does: yaml.v2's
// reader refuses characters that encoding/json writes unescaped (DEL, C1
// controls, a BOM inside a string), while its writer escapes them.
func yamlV2(js []byte, manifest bool) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if m, ok := v.(map[string]any); ok && manifest {
		delete(m, "status")
	}
	v, err := yamlNumbers(v)
	if err != nil {
		return nil, err
	}
	return yamlv2.Marshal(v)
}

// yamlNumbers gives numbers the Go types yaml.v2 decodes them to, so that
// they are written as in the JSON: integers with all their digits.
func yamlNumbers(v any) (any, error) {
	var err error
	switch v := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(string(v), 10, 64); err == nil {
			return i, nil
		}
		if u, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			return u, nil
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: out of range", v)
		}
		return f, nil
	case map[string]any:
		for k, e := range v {
			if v[k], err = yamlNumbers(e); err != nil {
				return nil, err
			}
		}
	case []any:
		for i, e := range v {
			if v[i], err = yamlNumbers(e); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}
