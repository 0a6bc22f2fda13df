package manifest

import (
	"encoding"
	"encoding/base64"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ObjectToYAML returns a Go object as YAML, exactly as JSONToYAML would
// write the object's encoding/json form.
func ObjectToYAML(obj any) ([]byte, error) {
	c := converters.Get().(*converter)
	defer converters.Put(c)
	return c.object(nil, obj, false)
}

// object writes obj as YAML without going through JSON text: it builds
// the converter's nodes from the value itself, following encoding/json's
// rules (field names and omitempty/omitzero from the json tags, embedded
// structs flattened, json.Marshaler called, []byte as base64). Rendering
// spends most of its time writing objects, and this halves that. With
// manifest, a top-level status is left out.
func (c *converter) object(dst []byte, obj any, manifest bool) ([]byte, error) {
	c.nodes, c.kids, c.stack = c.nodes[:0], c.kids[:0], c.stack[:0]
	root, err := c.value(reflect.ValueOf(obj))
	if err != nil {
		return dst, err
	}
	if n := &c.nodes[root]; manifest && n.kind == '{' {
		kids := c.kids[n.first : n.first+n.n]
		if i := slices.IndexFunc(kids, func(k int32) bool { return c.nodes[k].key == "status" }); i >= 0 {
			copy(kids[i:], kids[i+1:]) // the kids after it move up one
			n.n--
		}
	}
	return c.emitRoot(dst, root), nil
}

// ManifestYAML writes a Kubernetes object as a manifest: ObjectToYAML
// without the top-level status, which only a cluster writes (typed objects
// always carry one, e.g. a StatefulSet's "replicas: 0").
func ManifestYAML(dst []byte, obj any) ([]byte, error) {
	c := converters.Get().(*converter)
	defer converters.Put(c)
	return c.object(dst, obj, true)
}

var (
	marshalerType     = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// How a type encodes itself, if it does.
const (
	marshalsNot = iota
	marshalsItself
	marshalsByPointer // only when addressable, as encoding/json does
)

// typeInfo is what writing a type needs, worked out once per type:
// reflect's Implements and struct walks are slow.
type typeInfo struct {
	marshals int
	fields   []field // of a struct
}

var typeCache sync.Map // reflect.Type -> *typeInfo

func infoOf(t reflect.Type) *typeInfo {
	if ti, ok := typeCache.Load(t); ok {
		return ti.(*typeInfo)
	}
	ti := &typeInfo{marshals: marshalsNot}
	switch {
	case t.Implements(marshalerType) || t.Implements(textMarshalerType):
		ti.marshals = marshalsItself
	case t.Kind() != reflect.Pointer && (reflect.PointerTo(t).Implements(marshalerType) || reflect.PointerTo(t).Implements(textMarshalerType)):
		ti.marshals = marshalsByPointer
	}
	if t.Kind() == reflect.Struct {
		ti.fields = fieldsOf(t)
	}
	typeCache.Store(t, ti)
	return ti
}

// value adds the node of v and returns its index.
func (c *converter) value(v reflect.Value) (int32, error) {
	idx := int32(len(c.nodes))
	if !v.IsValid() {
		c.nodes = append(c.nodes, jnode{kind: 's', str: "null"})
		return idx, nil
	}
	t := v.Type()
	if t.Kind() == reflect.Pointer || t.Kind() == reflect.Interface {
		if v.IsNil() {
			c.nodes = append(c.nodes, jnode{kind: 's', str: "null"})
			return idx, nil
		}
	}
	ti := infoOf(t)
	if ti.marshals == marshalsItself || (ti.marshals == marshalsByPointer && v.CanAddr()) {
		return c.marshaled(v)
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		return c.value(v.Elem())
	case reflect.String:
		c.nodes = append(c.nodes, jnode{kind: '"', str: v.String()})
	case reflect.Bool:
		c.nodes = append(c.nodes, jnode{kind: 's', str: strconv.FormatBool(v.Bool())})
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		c.nodes = append(c.nodes, jnode{kind: 's', str: strconv.FormatInt(v.Int(), 10)})
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		c.nodes = append(c.nodes, jnode{kind: 's', str: strconv.FormatUint(v.Uint(), 10)})
	case reflect.Struct:
		return c.structValue(v, ti.fields)
	case reflect.Map:
		return c.mapValue(v)
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && v.IsNil() {
			c.nodes = append(c.nodes, jnode{kind: 's', str: "null"})
			return idx, nil
		}
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			c.nodes = append(c.nodes, jnode{kind: '"', str: base64.StdEncoding.EncodeToString(v.Bytes())})
			return idx, nil
		}
		c.nodes = append(c.nodes, jnode{kind: '['})
		base := len(c.stack)
		for i := range v.Len() {
			k, err := c.value(v.Index(i))
			if err != nil {
				return 0, err
			}
			c.stack = append(c.stack, k)
		}
		c.closeNode(idx, base)
	default:
		// Floats and the rest: encoding/json knows their exact form.
		return c.marshaled(v)
	}
	return idx, nil
}

// marshaled adds a value through encoding/json, for types that encode
// themselves (Quantity, Time, IntOrString...).
func (c *converter) marshaled(v reflect.Value) (int32, error) {
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return 0, err
	}
	src, pos := c.src, c.pos
	c.src, c.pos = b, 0
	idx, err := c.parse(0)
	c.src, c.pos = src, pos
	return idx, err
}

// closeNode gives the collection at idx the children pushed on the stack
// since base.
func (c *converter) closeNode(idx int32, base int) {
	kids := c.stack[base:]
	c.nodes[idx].first, c.nodes[idx].n = int32(len(c.kids)), int32(len(kids))
	c.kids = append(c.kids, kids...)
	c.stack = c.stack[:base]
}

func (c *converter) structValue(v reflect.Value, fields []field) (int32, error) {
	idx := int32(len(c.nodes))
	c.nodes = append(c.nodes, jnode{kind: '{'})
	base := len(c.stack)
	for _, f := range fields {
		fv, ok := fieldByIndex(v, f.index)
		if !ok || (f.omitEmpty && omitEmpty(fv)) || (f.omitZero && isZero(fv)) {
			continue
		}
		k, err := c.value(fv)
		if err != nil {
			return 0, err
		}
		c.nodes[k].key = f.name
		c.stack = append(c.stack, k)
	}
	c.closeNode(idx, base)
	return idx, nil
}

func (c *converter) mapValue(v reflect.Value) (int32, error) {
	idx := int32(len(c.nodes))
	if v.IsNil() {
		c.nodes = append(c.nodes, jnode{kind: 's', str: "null"})
		return idx, nil
	}
	if v.Type().Key().Kind() != reflect.String {
		return c.marshaled(v)
	}
	c.nodes = append(c.nodes, jnode{kind: '{'})
	base := len(c.stack)
	if m, ok := v.Interface().(map[string]string); ok {
		// Labels, annotations, selectors: no reflection needed.
		for k, val := range m {
			c.stack = append(c.stack, int32(len(c.nodes)))
			c.nodes = append(c.nodes, jnode{kind: '"', key: k, str: val})
		}
		kids := c.stack[base:]
		slices.SortFunc(kids, func(a, b int32) int { return strings.Compare(c.nodes[a].key, c.nodes[b].key) })
		c.closeNode(idx, base)
		return idx, nil
	}
	iter := v.MapRange()
	for iter.Next() {
		k, err := c.value(iter.Value())
		if err != nil {
			return 0, err
		}
		c.nodes[k].key = iter.Key().String()
		c.stack = append(c.stack, k)
	}
	kids := c.stack[base:]
	slices.SortFunc(kids, func(a, b int32) int { return strings.Compare(c.nodes[a].key, c.nodes[b].key) })
	c.closeNode(idx, base)
	return idx, nil
}

// field is a struct field as encoding/json sees it.
type field struct {
	name                string
	index               []int
	omitEmpty, omitZero bool
}

// fieldsOf lists a struct's JSON fields, embedded structs flattened, sorted
// by name as the output is.
func fieldsOf(t reflect.Type) []field {
	var fs []field
	var walk func(t reflect.Type, index []int)
	walk = func(t reflect.Type, index []int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(slices.Clone(index), i)
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if sf.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				walk(ft, idx)
				continue
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			fs = append(fs, field{name: name, index: idx,
				omitEmpty: strings.Contains(","+opts+",", ",omitempty,"),
				omitZero:  strings.Contains(","+opts+",", ",omitzero,")})
		}
	}
	walk(t, nil)
	// Sorted by name, then depth: as in encoding/json, the shallowest of
	// fields with one name wins, and a tie at that depth drops them all.
	slices.SortStableFunc(fs, func(a, b field) int {
		if n := strings.Compare(a.name, b.name); n != 0 {
			return n
		}
		return len(a.index) - len(b.index)
	})
	var out []field
	for i := 0; i < len(fs); {
		j := i + 1
		for j < len(fs) && fs[j].name == fs[i].name {
			j++
		}
		if j == i+1 || len(fs[i+1].index) > len(fs[i].index) {
			out = append(out, fs[i])
		}
		i = j
	}
	return out
}

// fieldByIndex follows index, through embedded pointers; ok is false at a
// nil embedded pointer (the field is then absent, as in encoding/json).
func fieldByIndex(v reflect.Value, index []int) (reflect.Value, bool) {
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v, true
}

// omitEmpty is encoding/json's omitempty test.
func omitEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

// isZero is encoding/json's omitzero test: an IsZero method, else the
// zero value.
func isZero(v reflect.Value) bool {
	if v.Kind() == reflect.Pointer && v.IsNil() {
		return true
	}
	if z, ok := v.Interface().(zeroer); ok {
		return z.IsZero()
	}
	if v.CanAddr() {
		if z, ok := v.Addr().Interface().(zeroer); ok {
			return z.IsZero()
		}
	}
	return v.IsZero()
}

type zeroer interface{ IsZero() bool }
