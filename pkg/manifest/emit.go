package manifest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
	yamlv2 "go.yaml.in/yaml/v2"
)

// emitter writes encoding/json's form of an object as YAML, byte for byte
// as yaml.v2 writes it (sorted keys, sequences at their key's indent),
// without yaml.v2's reflection and event machinery, which cost two thirds
// of rendering a VM. It covers what manifests are made of: block
// mappings and sequences, integers, booleans, null, strings that yaml.v2
// writes plain or quoted on one line, and multi-line strings it writes
// as literal blocks. For anything else (floats, folded or escaped strings,
// sequences of sequences, a top level that is not a mapping) it declines,
// and the caller has yaml.v2 write the document: the output is the same
// either way, which FuzzEmitter checks. An emitter keeps its buffers from
// one object to the next.
type emitter struct {
	js    bytes.Buffer // the object as JSON
	enc   *json.Encoder
	dec   jsontext.Decoder
	nodes []node
	text  []byte  // the nodes' keys and scalars, strings unquoted
	kids  []int32 // the nodes' children, mapping keys sorted
	stack []int32
	out   []byte
}

// node is a JSON value; its key when it is an object's member.
type node struct {
	kind jsontext.Kind
	key  span // in text
	val  span // in text: a scalar's text, a string unquoted
	kids span // in kids: a mapping's or a sequence's children
}

type span struct{ start, end int32 }

// bestWidth is the column after which yaml.v2 folds a string at a space.
const bestWidth = 80

// marshal returns obj in YAML; manifest drops its top-level status. The
// result is valid until the next call.
func (e *emitter) marshal(obj any, manifest bool) ([]byte, error) {
	if e.enc == nil {
		e.enc = json.NewEncoder(&e.js)
	}
	e.js.Reset()
	if err := e.enc.Encode(obj); err != nil {
		return nil, err
	}
	js := e.js.Bytes() // the decoder drains e.js, not its bytes
	if y, ok := e.emit(manifest); ok {
		return y, nil
	}
	return yamlV2(js, manifest)
}

// emit writes e.js as YAML, or says that yaml.v2 must.
func (e *emitter) emit(manifest bool) ([]byte, bool) {
	e.nodes, e.text, e.kids, e.stack, e.out = e.nodes[:0], e.text[:0], e.kids[:0], e.stack[:0], e.out[:0]
	e.dec.Reset(&e.js, jsontext.AllowDuplicateNames(true))
	root, err := e.parse()
	if err != nil || e.nodes[root].kind != '{' {
		return nil, false
	}
	kids := e.children(root)
	if manifest {
		kids = slices.DeleteFunc(kids, func(k int32) bool { return string(e.bytes(e.nodes[k].key)) == "status" })
	}
	if len(kids) == 0 {
		return nil, false // yaml.v2 writes "{}"
	}
	return e.out, e.mapping(kids, 0, false)
}

// parse reads one JSON value into nodes and returns its index.
func (e *emitter) parse() (int32, error) {
	i := int32(len(e.nodes))
	e.nodes = append(e.nodes, node{kind: e.dec.PeekKind()})
	switch e.nodes[i].kind {
	case '{', '[':
		if _, err := e.dec.ReadToken(); err != nil {
			return 0, err
		}
		mark := len(e.stack)
		for e.dec.PeekKind() != '}' && e.dec.PeekKind() != ']' {
			var key span
			if e.nodes[i].kind == '{' {
				k, err := e.dec.ReadValue()
				if err != nil {
					return 0, err
				}
				if key, err = e.unquote(k); err != nil {
					return 0, err
				}
			}
			kid, err := e.parse()
			if err != nil {
				return 0, err
			}
			e.nodes[kid].key = key
			e.stack = append(e.stack, kid)
		}
		if _, err := e.dec.ReadToken(); err != nil {
			return 0, err
		}
		kids := e.stack[mark:]
		if e.nodes[i].kind == '{' {
			slices.SortFunc(kids, func(a, b int32) int { return keyCompare(e.bytes(e.nodes[a].key), e.bytes(e.nodes[b].key)) })
		}
		e.nodes[i].kids = span{int32(len(e.kids)), int32(len(e.kids) + len(kids))}
		e.kids = append(e.kids, kids...)
		e.stack = e.stack[:mark]
	default:
		v, err := e.dec.ReadValue()
		if err != nil {
			return 0, err
		}
		if v.Kind() == '"' {
			e.nodes[i].val, err = e.unquote(v)
		} else {
			start := int32(len(e.text))
			e.text = append(e.text, v...)
			e.nodes[i].val = span{start, int32(len(e.text))}
		}
		if err != nil {
			return 0, err
		}
	}
	return i, nil
}

func (e *emitter) unquote(v jsontext.Value) (span, error) {
	start := int32(len(e.text))
	var err error
	e.text, err = jsontext.AppendUnquote(e.text, v)
	return span{start, int32(len(e.text))}, err
}

func (e *emitter) bytes(s span) []byte { return e.text[s.start:s.end] }

func (e *emitter) children(i int32) []int32 {
	s := e.nodes[i].kids
	return e.kids[s.start:s.end]
}

// mapping writes a non-empty block mapping whose keys stand at indent;
// inItem: the first key follows a sequence's "- ".
func (e *emitter) mapping(kids []int32, indent int, inItem bool) bool {
	for n, k := range kids {
		if n > 0 || !inItem {
			e.out = appendSpaces(e.out, indent)
		}
		key := e.bytes(e.nodes[k].key)
		if len(key) == 0 || len(key) > 128 {
			return false // quoted, or a complex key ("? ")
		}
		start := len(e.out)
		if !e.scalar(key, indent) {
			return false
		}
		e.out = append(e.out, ':')
		if !e.value(k, indent, indent+len(e.out)-start+1) {
			return false
		}
	}
	return true
}

// value writes node i after its key or "-", and the line break after it.
// The node belongs to a key or "- " at indent; a scalar starts at column.
func (e *emitter) value(i int32, indent, column int) bool {
	kids := e.children(i)
	switch n := e.nodes[i]; {
	case n.kind == '{' && len(kids) == 0:
		e.out = append(e.out, " {}\n"...)
	case n.kind == '[' && len(kids) == 0:
		e.out = append(e.out, " []\n"...)
	case n.kind == '{':
		e.out = append(e.out, '\n')
		return e.mapping(kids, indent+2, false)
	case n.kind == '[':
		e.out = append(e.out, '\n')
		return e.sequence(kids, indent)
	default:
		e.out = append(e.out, ' ')
		if !e.leaf(n, indent, column) {
			return false
		}
		e.out = append(e.out, '\n')
	}
	return true
}

// sequence writes a non-empty block sequence at indent, as yaml.v2 writes
// a mapping's: not indented.
func (e *emitter) sequence(kids []int32, indent int) bool {
	for _, k := range kids {
		e.out = appendSpaces(e.out, indent)
		e.out = append(e.out, '-')
		n := e.nodes[k]
		switch {
		case n.kind == '[' && len(e.children(k)) > 0:
			return false
		case n.kind == '{' && len(e.children(k)) > 0:
			e.out = append(e.out, ' ')
			if !e.mapping(e.children(k), indent+2, true) {
				return false
			}
		default:
			if !e.value(k, indent, indent+2) {
				return false
			}
		}
	}
	return true
}

// leaf writes a scalar whose key or "-" is at indent.
func (e *emitter) leaf(n node, indent, column int) bool {
	v := e.bytes(n.val)
	switch n.kind {
	case 't', 'f', 'n':
		e.out = append(e.out, v...) // true, false, null
		return true
	case '0':
		// An integer as yaml.v2 writes the int64 or uint64 it becomes.
		if !isInteger(v) {
			return false
		}
		e.out = append(e.out, v...)
		return true
	}
	if bytes.IndexByte(v, '\n') >= 0 {
		return e.literal(v, indent+2)
	}
	return e.scalar(v, column)
}

func isInteger(v []byte) bool {
	if _, err := strconv.ParseInt(string(v), 10, 64); err == nil {
		return !bytes.HasPrefix(v, []byte("-0"))
	}
	_, err := strconv.ParseUint(string(v), 10, 64)
	return err == nil
}

// scalar writes a one-line string starting at column: plain, or quoted
// when yaml.v2 would read it as another type. It declines strings that
// yaml.v2 folds or escapes, or quotes for their characters.
func (e *emitter) scalar(s []byte, column int) bool {
	if !plainSafe(s) || bytes.IndexByte(s, ' ') >= 0 && column+len(s)+2 > bestWidth {
		return false
	}
	switch readsAsString(s) {
	case yes:
		e.out = append(e.out, s...)
		return true
	case no:
		if !bytes.ContainsAny(s, `"\`) { // nothing to escape
			e.out = append(append(append(e.out, '"'), s...), '"')
			return true
		}
	}
	// yaml.v2 writes it as it does at the top level: ask it.
	y, err := yamlv2.Marshal(string(s))
	if err != nil {
		return false
	}
	e.out = append(e.out, bytes.TrimSuffix(y, []byte("\n"))...)
	return true
}

type answer int

const (
	unsure answer = iota
	yes
	no
)

// readsAsString tells whether yaml.v2 reads s, written plain, as a
// string, so that it writes it plain rather than quoted: its resolve and
// isBase60Float, with what is rare and intricate (timestamps, base 60
// numbers) left unsure.
func readsAsString(s []byte) answer {
	if len(s) == 0 {
		return no // null
	}
	switch c := s[0]; {
	case bytes.IndexByte([]byte("yYnNtTfFoO~"), c) >= 0:
		if yamlWords[string(s)] {
			return no
		}
		return yes
	case c == '.':
		if yamlWords[string(s)] || isFloat(s) {
			return no
		}
		return yes
	case c == '+' || c == '-' || '0' <= c && c <= '9':
		if yamlWords[string(s)] {
			return no
		}
		if bytes.IndexByte(s, ':') >= 0 || len(s) > 4 && s[4] == '-' {
			return unsure // a base 60 number or a timestamp
		}
		plain := string(bytes.ReplaceAll(s, []byte("_"), nil))
		if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
			return no
		}
		if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
			return no
		}
		if isFloat([]byte(plain)) {
			return no
		}
		return yes
	}
	return yes
}

// yamlWords are the plain scalars that yaml.v2 reads as booleans, null or
// special floats.
var yamlWords = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true,
	"n": true, "N": true, "no": true, "No": true, "NO": true,
	"true": true, "True": true, "TRUE": true, "false": true, "False": true, "FALSE": true,
	"on": true, "On": true, "ON": true, "off": true, "Off": true, "OFF": true,
	"~": true, "null": true, "Null": true, "NULL": true,
	".nan": true, ".NaN": true, ".NAN": true, ".inf": true, ".Inf": true, ".INF": true,
	"+.inf": true, "+.Inf": true, "+.INF": true, "-.inf": true, "-.Inf": true, "-.INF": true,
}

// isFloat: yaml.v2's float syntax, [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
// as strconv.ParseFloat takes it without its words and hexadecimal.
func isFloat(s []byte) bool {
	for _, c := range s {
		if !isDigit(c) && bytes.IndexByte([]byte("+-.eE"), c) < 0 {
			return false
		}
	}
	_, err := strconv.ParseFloat(string(s), 64)
	return err == nil
}

// plainSafe tells whether yaml.v2's emitter allows s plain in block
// context (its yaml_emitter_analyze_scalar), for printable ASCII.
func plainSafe(s []byte) bool {
	if len(s) == 0 {
		return true // quoted: it reads as null
	}
	blankAfter := func(i int) bool { return i+1 == len(s) || s[i+1] == ' ' }
	switch c := s[0]; {
	case indicator[c], (c == '?' || c == '-') && blankAfter(0), s[len(s)-1] == ' ',
		len(s) >= 3 && (c == '-' || c == '.') && s[1] == c && s[2] == c: // "---", "..."
		return false
	}
	for i, c := range s {
		if !mayStop[c] {
			continue
		}
		if c < 0x20 || c > 0x7e || c == ':' && blankAfter(i) || c == '#' && i > 0 && s[i-1] == ' ' {
			return false
		}
	}
	return true
}

// indicator marks the characters that keep a string from being plain at
// its start; mayStop those that may keep it from being plain anywhere.
var indicator, mayStop = func() (ind, stop [256]bool) {
	for _, c := range []byte(" #,[]{}&*!|>'\"%@`") {
		ind[c] = true
	}
	for c := range 256 {
		stop[c] = c < 0x20 || c > 0x7e || c == ':' || c == '#'
	}
	return ind, stop
}()

// literal writes a multi-line string as a literal block ("|") with its
// lines at indent, or declines when yaml.v2 would quote it, indicate its
// indentation or keep several final line breaks.
func (e *emitter) literal(s []byte, indent int) bool {
	if s[0] == ' ' || s[0] == '\n' || bytes.HasSuffix(s, []byte("\n\n")) {
		return false
	}
	for i, c := range s {
		if c != '\n' && (c < 0x20 || c > 0x7e) || c == ' ' && (i+1 == len(s) || s[i+1] == '\n') {
			return false
		}
	}
	e.out = append(e.out, '|')
	if s[len(s)-1] != '\n' {
		e.out = append(e.out, '-')
	}
	for line := range bytes.Lines(s) {
		e.out = append(e.out, '\n')
		if len(line) > 1 || line[0] != '\n' {
			e.out = appendSpaces(e.out, indent)
		}
		e.out = append(e.out, bytes.TrimSuffix(line, []byte("\n"))...)
	}
	return true
}

func appendSpaces(b []byte, n int) []byte {
	for range n {
		b = append(b, ' ')
	}
	return b
}

// keyCompare orders mapping keys as yaml.v2 does (its keyList.Less on
// strings): letters after other characters, runs of digits by their
// value. keyList.Less compares runes, the same as bytes for ASCII; a key
// of other characters makes emit decline. The first difference decides,
// either way round, so one pass is enough.
func keyCompare(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		al, bl := isLetter(a[i]), isLetter(b[i])
		if al && bl {
			return cmp.Compare(a[i], b[i])
		}
		if al || bl {
			return boolCompare(bl)
		}
		var ai, bi int
		var an, bn int64
		if a[i] == '0' || b[i] == '0' {
			for j := i - 1; j >= 0 && isDigit(a[j]); j-- {
				if a[j] != '0' {
					an, bn = 1, 1
					break
				}
			}
		}
		for ai = i; ai < len(a) && isDigit(a[ai]); ai++ {
			an = an*10 + int64(a[ai]-'0')
		}
		for bi = i; bi < len(b) && isDigit(b[bi]); bi++ {
			bn = bn*10 + int64(b[bi]-'0')
		}
		if an != bn {
			return cmp.Compare(an, bn)
		}
		if ai != bi {
			return cmp.Compare(ai, bi)
		}
		return cmp.Compare(a[i], b[i])
	}
	return cmp.Compare(len(a), len(b))
}

// boolCompare is -1 for true (less), 1 for false.
func boolCompare(less bool) int {
	if less {
		return -1
	}
	return 1
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
