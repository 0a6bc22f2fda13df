package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
	"unsafe"
)

// JSONToYAML converts one JSON value to block-style YAML with sorted keys,
// as kubectl prints it, and appends it to dst. It is a small converter of
// its own because going through a generic YAML library (parse the JSON as
// YAML, then emit) costs ten times more, and rendering must keep up with
// thousands of VMs a second. Strings that could be read back as anything
// else are double-quoted (JSON's string syntax is valid YAML).
func JSONToYAML(dst, src []byte) ([]byte, error) {
	c := converters.Get().(*converter)
	defer converters.Put(c)
	return c.convert(dst, src)
}

// converters keeps the parse arenas of converters for reuse.
var converters = sync.Pool{New: func() any { return new(converter) }}

type converter struct {
	src   []byte
	pos   int
	nodes []jnode
	kids  []int32
	stack []int32
}

// jnode is a value to write; an object's or array's children are
// kids[first:first+n].
type jnode struct {
	kind byte   // '{', '[', '"' or 's' (another scalar)
	key  string // the member name
	// str is a string's value, or another scalar's JSON token.
	str   string
	first int32
	n     int32
}

var errSyntax = errors.New("invalid JSON")

// jsonMaxDepth is encoding/json's limit of nested objects and arrays, so
// that the converter takes the JSON that encoding/json takes.
const jsonMaxDepth = 10000

func (c *converter) convert(dst, src []byte) ([]byte, error) {
	c.src, c.pos = src, 0
	defer func() { c.src = nil }() // do not keep the caller's bytes alive in a pool
	c.nodes, c.kids, c.stack = c.nodes[:0], c.kids[:0], c.stack[:0]
	root, err := c.parse(0)
	if err != nil {
		return dst, err
	}
	c.space()
	if c.pos != len(c.src) {
		return dst, fmt.Errorf("%w: data after the value at offset %d", errSyntax, c.pos)
	}
	return c.emitRoot(dst, root), nil
}

// emitRoot writes the value at root as a YAML document.
func (c *converter) emitRoot(dst []byte, root int32) []byte {
	n := &c.nodes[root]
	switch {
	case n.kind == '{' && n.n > 0:
		return c.emitMembers(dst, root, 0)
	case n.kind == '[' && n.n > 0:
		return c.emitItems(dst, root, 0)
	}
	dst = c.emitInline(dst, root, 0)
	return append(dst, '\n')
}

func (c *converter) space() {
	for c.pos < len(c.src) {
		switch c.src[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

// parse adds the value at pos, inside depth objects and arrays.
func (c *converter) parse(depth int) (int32, error) {
	c.space()
	if c.pos >= len(c.src) {
		return 0, fmt.Errorf("%w: unexpected end", errSyntax)
	}
	idx := int32(len(c.nodes))
	switch c.src[c.pos] {
	case '{', '[':
		if depth == jsonMaxDepth {
			return 0, fmt.Errorf("%w: nested deeper than %d at offset %d", errSyntax, jsonMaxDepth, c.pos)
		}
		open := c.src[c.pos]
		c.nodes = append(c.nodes, jnode{kind: open})
		c.pos++
		base := len(c.stack)
		closeCh := byte('}')
		if open == '[' {
			closeCh = ']'
		}
		c.space()
		if c.pos < len(c.src) && c.src[c.pos] == closeCh {
			c.pos++
			return idx, nil
		}
		for {
			var key string
			if open == '{' {
				c.space()
				s, err := c.str()
				if err != nil {
					return 0, err
				}
				key = decode(s[1 : len(s)-1])
				c.space()
				if c.pos >= len(c.src) || c.src[c.pos] != ':' {
					return 0, fmt.Errorf("%w: expected ':' at offset %d", errSyntax, c.pos)
				}
				c.pos++
			}
			child, err := c.parse(depth + 1)
			if err != nil {
				return 0, err
			}
			c.nodes[child].key = key
			c.stack = append(c.stack, child)
			c.space()
			if c.pos >= len(c.src) {
				return 0, fmt.Errorf("%w: unexpected end", errSyntax)
			}
			if ch := c.src[c.pos]; ch == ',' {
				c.pos++
				continue
			} else if ch == closeCh {
				c.pos++
				break
			}
			return 0, fmt.Errorf("%w: unexpected %q at offset %d", errSyntax, c.src[c.pos], c.pos)
		}
		kids := c.stack[base:]
		if open == '{' {
			slices.SortFunc(kids, func(a, b int32) int { return strings.Compare(c.nodes[a].key, c.nodes[b].key) })
		}
		c.nodes[idx].first, c.nodes[idx].n = int32(len(c.kids)), int32(len(kids))
		c.kids = append(c.kids, kids...)
		c.stack = c.stack[:base]
		return idx, nil
	case '"':
		s, err := c.str()
		if err != nil {
			return 0, err
		}
		c.nodes = append(c.nodes, jnode{kind: '"', str: decode(s[1 : len(s)-1])})
		return idx, nil
	default:
		start := c.pos
		for c.pos < len(c.src) && !strings.ContainsRune(",]} \t\r\n", rune(c.src[c.pos])) {
			c.pos++
		}
		tok := c.src[start:c.pos]
		if !json.Valid(tok) {
			return 0, fmt.Errorf("%w: bad value %q at offset %d", errSyntax, tok, start)
		}
		c.nodes = append(c.nodes, jnode{kind: 's', str: unsafe.String(unsafe.SliceData(tok), len(tok))})
		return idx, nil
	}
}

// str scans a JSON string and returns it with its quotes.
func (c *converter) str() ([]byte, error) {
	start := c.pos
	if c.pos >= len(c.src) || c.src[c.pos] != '"' {
		return nil, fmt.Errorf("%w: expected a string at offset %d", errSyntax, c.pos)
	}
	escaped := false
	for c.pos++; c.pos < len(c.src); c.pos++ {
		switch b := c.src[c.pos]; {
		case b < ' ':
			return nil, fmt.Errorf("%w: control character in a string at offset %d", errSyntax, c.pos)
		case b == '\\':
			c.pos++
			escaped = true
		case b == '"':
			c.pos++
			s := c.src[start:c.pos]
			// Escapes are rare: let encoding/json check them ("\0" is none).
			if escaped && !json.Valid(s) {
				return nil, fmt.Errorf("%w: bad escape in the string at offset %d", errSyntax, start)
			}
			return s, nil
		}
	}
	return nil, fmt.Errorf("%w: unterminated string at offset %d", errSyntax, start)
}

const spaces = "                                                                "

func indent(dst []byte, n int) []byte {
	for n > len(spaces) {
		dst = append(dst, spaces...)
		n -= len(spaces)
	}
	return append(dst, spaces[:n]...)
}

// emitMembers writes a non-empty object's members, one per line.
func (c *converter) emitMembers(dst []byte, obj int32, ind int) []byte {
	n := c.nodes[obj]
	for i, k := range c.kids[n.first : n.first+n.n] {
		if i > 0 {
			dst = indent(dst, ind)
		}
		dst = emitString(dst, c.nodes[k].key, -1)
		dst = append(dst, ':')
		dst = c.emitValue(dst, k, ind, false)
	}
	return dst
}

// emitItems writes a non-empty array's items, one per "- " line.
func (c *converter) emitItems(dst []byte, arr int32, ind int) []byte {
	n := c.nodes[arr]
	for i, k := range c.kids[n.first : n.first+n.n] {
		if i > 0 {
			dst = indent(dst, ind)
		}
		dst = append(dst, '-')
		dst = c.emitValue(dst, k, ind, true)
	}
	return dst
}

// emitValue writes what follows "key:" or "-". In a list item, a nested
// object starts on the same line and a nested list is indented below.
func (c *converter) emitValue(dst []byte, v int32, ind int, item bool) []byte {
	n := &c.nodes[v]
	switch {
	case n.kind == '{' && n.n > 0:
		if item {
			dst = append(dst, ' ')
			return c.emitMembers(dst, v, ind+2)
		}
		dst = append(dst, '\n')
		dst = indent(dst, ind+2)
		return c.emitMembers(dst, v, ind+2)
	case n.kind == '[' && n.n > 0:
		dst = append(dst, '\n')
		if item {
			dst = indent(dst, ind+2)
			return c.emitItems(dst, v, ind+2)
		}
		dst = indent(dst, ind)
		return c.emitItems(dst, v, ind)
	}
	dst = append(dst, ' ')
	dst = c.emitInline(dst, v, ind+2)
	return append(dst, '\n')
}

// emitInline writes a scalar or an empty collection; ind is the indent of
// a literal block's lines.
func (c *converter) emitInline(dst []byte, v int32, ind int) []byte {
	n := &c.nodes[v]
	switch n.kind {
	case '{':
		return append(dst, "{}"...)
	case '[':
		return append(dst, "[]"...)
	case '"':
		return emitString(dst, n.str, ind)
	}
	return append(dst, n.str...)
}

// decode returns the string a JSON string's inside stands for. Without
// escapes it shares the source's bytes, which outlive the conversion.
func decode(inner []byte) string {
	if bytes.IndexByte(inner, '\\') < 0 {
		return unsafe.String(unsafe.SliceData(inner), len(inner))
	}
	if decoded, ok := unescape(inner); ok {
		return string(decoded)
	}
	var full string
	_ = json.Unmarshal(append(append([]byte{'"'}, inner...), '"'), &full) // the parser checked it
	return full
}

// emitString writes a string: plain when that reads back as the same
// string, as a literal block when it has several lines (ind >= 0 allows
// that), else double-quoted.
func emitString(dst []byte, s string, ind int) []byte {
	switch {
	case ind >= 0 && strings.IndexByte(s, '\n') >= 0 && literalOK(s):
		return literal(dst, s, ind)
	case plainOK(s):
		return append(dst, s...)
	}
	return quote(dst, s)
}

// quote writes s as a YAML double-quoted string; unlike JSON's, YAML's
// escapes have no \/, and non-printable characters must be escaped.
func quote(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			dst = append(dst, '\\', byte(r))
		case r == '\n':
			dst = append(dst, '\\', 'n')
		case r == '\t':
			dst = append(dst, '\\', 't')
		case r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x2028 || r == 0x2029 || r == 0xfeff || r == utf8.RuneError || !unicode.IsPrint(r) && r != ' ':
			if r > 0xffff {
				dst = fmt.Appendf(dst, "\\U%08x", r)
			} else {
				dst = fmt.Appendf(dst, "\\u%04x", r)
			}
		default:
			dst = utf8.AppendRune(dst, r)
		}
	}
	return append(dst, '"')
}

// unescape decodes the inside of a JSON string; ok is false for escapes
// it leaves to the quoted form (\u, which may be a surrogate pair).
func unescape(inner []byte) (out []byte, ok bool) {
	out = make([]byte, 0, len(inner))
	for i := 0; i < len(inner); i++ {
		b := inner[i]
		if b != '\\' {
			out = append(out, b)
			continue
		}
		if i++; i == len(inner) {
			return nil, false
		}
		switch inner[i] {
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case '"', '\\', '/':
			out = append(out, inner[i])
		default:
			return nil, false
		}
	}
	return out, true
}

// literalOK tells whether a multi-line string can be a literal block.
func literalOK(s string) bool {
	// The first line sets the block's indent: a space or tab there would
	// be read as more indent (libyaml refuses the tab).
	if strings.IndexByte(s, '\n') < 0 || len(s) == 0 || s[0] == ' ' || s[0] == '\t' || s[0] == '\n' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < ' ' && b != '\n' && b != '\t') || b == 0x7f {
			return false
		}
	}
	// Trailing blank lines would need the keep indicator; quote instead.
	return !strings.HasSuffix(s, "\n\n")
}

func literal(dst []byte, s string, ind int) []byte {
	dst = append(dst, '|')
	if s[len(s)-1] != '\n' {
		dst = append(dst, '-')
	} else {
		s = s[:len(s)-1]
	}
	for line := range strings.SplitSeq(s, "\n") {
		dst = append(dst, '\n')
		if len(line) > 0 {
			dst = indent(dst, ind)
			dst = append(dst, line...)
		}
	}
	return dst
}

// plainOK tells whether s can be written without quotes and read back as
// the same string by YAML 1.1 and 1.2 readers alike.
func plainOK(s string) bool {
	if len(s) == 0 || s[0] == ' ' || s[len(s)-1] == ' ' || s[len(s)-1] == ':' {
		return false
	}
	first := s[0]
	digit := first >= '0' && first <= '9'
	if !(digit || first == '/' || first == '_' || (first|0x20 >= 'a' && first|0x20 <= 'z')) {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		case b == '-' || b == '_' || b == '.' || b == '/' || b == '=' || b == '+' || b == '@' || b == ',':
		case b == ':' && s[i+1] != ' ':
		case b == ' ' && s[i+1] != '#' && s[i-1] != ':':
		default:
			return false
		}
	}
	if digit {
		return quantityLike(s)
	}
	return len(s) > 5 || !reserved(s)
}

// reserved tells whether s reads as a boolean or null in YAML 1.1 or 1.2,
// in any letter case.
func reserved(s string) bool {
	var lower [5]byte
	for i := 0; i < len(s); i++ {
		lower[i] = s[i] | 0x20
	}
	switch string(lower[:len(s)]) {
	case "y", "yes", "n", "no", "true", "false", "on", "off", "null":
		return true
	}
	return false
}

// quantityLike accepts digits followed by a unit ("40Gi", "500m"); any
// other string that starts with a digit might read as a number or a date.
func quantityLike(s string) bool {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	switch s[i:] {
	case "m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei":
		return true
	}
	return false
}
