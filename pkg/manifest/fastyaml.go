package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"
)

// YAMLToJSON converts one YAML document of at most MaxDocumentSize bytes
// to JSON (fast path, else sigs.k8s.io/yaml). The result is the same as
// sigs.k8s.io/yaml.YAMLToJSONStrict's, byte for byte: a duplicate key is
// an error, as in kubectl's strict decoding, not a silent last-wins. So is
// a document that aliases expand beyond MaxDocumentSize. A leading UTF-8
// byte order mark is ignored. Errors are one line. It is safe for
// concurrent use.
func YAMLToJSON(doc []byte) ([]byte, error) {
	if len(doc) > MaxDocumentSize {
		return nil, tooLarge(MaxDocumentSize)
	}
	doc = bytes.TrimPrefix(doc, utf8BOM)
	if out, ok := fastYAMLToJSON(doc); ok {
		return out, nil
	}
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
		return nil // the conversion reports it
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

// fastYAMLToJSON converts a YAML document in the block-style subset that
// Kubernetes manifests use to JSON. ok is false when the document uses
// anything outside the subset; the caller then uses the full YAML library.
//
// The subset: block mappings and sequences (also "- key: v" and sequences
// at their key's indent), plain scalars, one-line quoted scalars, literal
// and folded block scalars without an indentation indicator, one-line flow
// collections of scalars, comments and a leading "---". Scalars resolve as
// yaml.v2 resolves them (YAML 1.1), and the JSON is written as
// encoding/json writes what yaml.v2 decodes. Anything the subset leaves
// out (anchors, tags, multi-line flow scalars, tabs in indentation,
// non-string keys, duplicate keys, ...) gives ok == false rather than a
// guess. It is safe for concurrent use.
func fastYAMLToJSON(doc []byte) (out []byte, ok bool) {
	p := fyPool.Get().(*fyParser)
	out, ok = p.run(doc)
	p.release()
	return out, ok
}

var fyPool = sync.Pool{New: func() any { return new(fyParser) }}

// fyMaxDepth keeps the recursion (and yaml.v2's own nesting limits) far away.
const fyMaxDepth = 200

// fyMaxKey stays under libyaml's 1024-character limit on simple keys.
const fyMaxKey = 1000

// Line kinds.
const (
	lnBlank   = iota // only spaces
	lnComment        // spaces, then '#'
	lnTab            // spaces, then a tab: an error outside block scalars
	lnText
)

type fyLine struct {
	start, end int // end excludes the line break
	ind        int // leading spaces
	kind       uint8
	nl         bool // a line break follows
}

// Node kinds.
const (
	fnScalar = iota
	fnMap
	fnSeq
)

// fyNode holds offsets rather than slices: no pointers for the GC to scan.
type fyNode struct {
	kind     uint8
	key      fyKey // a mapping member's key
	vs, ve   int32 // a scalar's JSON text is sbuf[vs:ve]
	first, n int32 // a collection's children are kids[first:first+n]
}

// fyKey is a decoded key: kbuf[s:e] if inK, else src[s:e].
type fyKey struct {
	s, e int32
	inK  bool
}

func (p *fyParser) keyBytes(k fyKey) []byte {
	if k.inK {
		return p.kbuf[k.s:k.e]
	}
	return p.src[k.s:k.e]
}

type fyParser struct {
	src   []byte
	lines []fyLine
	nodes []fyNode
	kids  []int
	stack []int
	sbuf  []byte // JSON text of scalars; only appended to while parsing
	kbuf  []byte // decoded quoted keys; likewise
	tmp   []byte
	out   []byte
	depth int
}

func (p *fyParser) release() {
	p.src = nil
	// A huge document should not pin its buffers in the pool.
	if max(cap(p.sbuf), cap(p.kbuf), cap(p.tmp), cap(p.out)) > 1<<20 || max(cap(p.lines), cap(p.nodes)) > 1<<16 {
		return
	}
	fyPool.Put(p)
}

func (p *fyParser) run(doc []byte) ([]byte, bool) {
	if len(doc) > math.MaxInt32 {
		return nil, false // offsets are int32
	}
	p.src = doc
	p.nodes, p.kids, p.stack = p.nodes[:0], p.kids[:0], p.stack[:0]
	p.sbuf, p.kbuf, p.out = p.sbuf[:0], p.kbuf[:0], p.out[:0]
	p.depth = 0
	if !p.splitLines() {
		return nil, false
	}
	li, ok := p.skipBlank(0)
	if !ok {
		return nil, false
	}
	if li == len(p.lines) {
		return []byte("null"), true
	}
	root, next, ok := p.block(li, p.lines[li].ind)
	if !ok {
		return nil, false
	}
	if next, ok = p.skipBlank(next); !ok || next != len(p.lines) {
		return nil, false
	}
	if p.out, ok = p.emit(p.out, root); !ok {
		return nil, false
	}
	return bytes.Clone(p.out), true
}

// splitLines splits the document into lines and rejects characters the
// YAML reader rejects or treats specially (lone CR, NEL, LS, PS and BOM
// are line breaks or markers there).
func (p *fyParser) splitLines() bool {
	src := p.src
	lines := p.lines[:0]
	content, marker := false, false
	for start := 0; start < len(src); {
		i := len(src)
		if n := bytes.IndexByte(src[start:], '\n'); n >= 0 {
			i = start + n
		}
		for k := start; k < i; {
			if i-k >= 8 && plain8(binary.LittleEndian.Uint64(src[k:])) {
				k += 8
				continue
			}
			c := src[k]
			if c-0x20 < 0x7f-0x20 || c == '\t' {
				k++
				continue
			}
			if c == '\r' && k+1 == i && i < len(src) {
				break // CRLF reads as LF; a lone CR is left to yaml.v2
			}
			if c < 0x80 {
				return false
			}
			r, size := utf8.DecodeRune(src[k:i])
			if r < 0xa0 || (r == utf8.RuneError && size == 1) || r == 0x2028 || r == 0x2029 || r == 0xfeff || r == 0xfffe || r == 0xffff {
				return false
			}
			k += size
		}
		ln := fyLine{start: start, end: i, nl: i < len(src)}
		if i > start && src[i-1] == '\r' {
			ln.end--
		}
		j := start
		for j < ln.end && src[j] == ' ' {
			j++
		}
		ln.ind = j - start
		e := ln.end
		switch {
		case j == e:
			ln.kind = lnBlank
		case src[j] == '#':
			ln.kind = lnComment
		case src[j] == '\t':
			ln.kind = lnTab
		default:
			ln.kind = lnText
		}
		if ln.ind == 0 && e-start >= 3 && (string(src[start:start+3]) == "---" || string(src[start:start+3]) == "...") &&
			(e-start == 3 || src[start+3] == ' ' || src[start+3] == '\t') {
			// Only one leading bare "---" is in the subset.
			if content || marker || src[start] == '.' {
				return false
			}
			k := start + 3
			for k < e && src[k] == ' ' {
				k++
			}
			if k < e && src[k] != '#' {
				return false
			}
			marker = true
			ln.kind = lnComment
		}
		if ln.kind >= lnTab {
			content = true
		}
		lines = append(lines, ln)
		start = i + 1
	}
	p.lines = lines
	return true
}

// plain8 tells whether 8 bytes are all printable ASCII (0x20 to 0x7e).
func plain8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := (x - 0x20*ones) &^ x // high bit set for bytes below 0x20
	y := x ^ 0x7f*ones
	del := (y - ones) &^ y // high bit set for 0x7f bytes
	return (x|below|del)&highs == 0
}

// skipBlank returns the first line from li on that is not blank or a
// comment.
func (p *fyParser) skipBlank(li int) (int, bool) {
	for ; li < len(p.lines); li++ {
		switch p.lines[li].kind {
		case lnBlank, lnComment:
		case lnTab:
			return li, false
		default:
			return li, true
		}
	}
	return li, true
}

// entry tells whether a block sequence entry ("-" and a blank) is at pos:
// 1 yes, 0 no, -1 outside the subset.
func (p *fyParser) entry(pos, end int) int {
	if pos >= end || p.src[pos] != '-' {
		return 0
	}
	if pos+1 == end || p.src[pos+1] == ' ' {
		return 1
	}
	if p.src[pos+1] == '\t' {
		return -1
	}
	return 0
}

// block parses the mapping or sequence whose first line is li, starting at
// column col.
func (p *fyParser) block(li, col int) (int, int, bool) {
	ln := p.lines[li]
	switch p.entry(ln.start+col, ln.end) {
	case 1:
		return p.seq(li, col)
	case -1:
		return 0, 0, false
	}
	return p.mapping(li, col)
}

func (p *fyParser) newNode(kind uint8) int {
	p.nodes = append(p.nodes, fyNode{kind: kind})
	return len(p.nodes) - 1
}

// scalar makes a node of the JSON text appended to sbuf since start.
func (p *fyParser) scalar(start int) int {
	p.nodes = append(p.nodes, fyNode{kind: fnScalar, vs: int32(start), ve: int32(len(p.sbuf))})
	return len(p.nodes) - 1
}

// collection makes a node of the children pushed since base.
func (p *fyParser) collection(kind uint8, base int) int {
	n := p.newNode(kind)
	p.nodes[n].first, p.nodes[n].n = int32(len(p.kids)), int32(len(p.stack)-base)
	p.kids = append(p.kids, p.stack[base:]...)
	p.stack = p.stack[:base]
	return n
}

// seq parses a block sequence whose first "-" is on line li at column col.
// It returns the node and the line after the sequence.
func (p *fyParser) seq(li, col int) (node, next int, ok bool) {
	if p.depth++; p.depth > fyMaxDepth {
		return 0, 0, false
	}
	base := len(p.stack)
	for {
		ln := p.lines[li]
		c := ln.start + col + 1
		for c < ln.end && p.src[c] == ' ' {
			c++
		}
		var child int
		switch p.entry(c, ln.end) {
		case 1:
			child, next, ok = p.seq(li, c-ln.start)
		case -1:
			return 0, 0, false
		default:
			switch _, _, k := p.key(c, ln.end); k {
			case keyYes:
				child, next, ok = p.mapping(li, c-ln.start)
			case keyNo:
				child, next, ok = p.value(li, c, col, false)
			default:
				return 0, 0, false
			}
		}
		if !ok {
			return 0, 0, false
		}
		p.stack = append(p.stack, child)
		var more bool
		if next, more, ok = p.nextSibling(next, col); !ok {
			return 0, 0, false
		}
		if !more {
			break
		}
		nl := p.lines[next]
		e := p.entry(nl.start+col, nl.end)
		if e < 0 {
			return 0, 0, false
		}
		if e == 0 {
			break
		}
		li = next
	}
	p.depth--
	return p.collection(fnSeq, base), next, true
}

// nextSibling finds the line after a collection's item: more is false at
// the collection's end (end of input or a shallower line), ok is false
// for a deeper line, which the subset does not have.
func (p *fyParser) nextSibling(next, col int) (line int, more, ok bool) {
	if next, ok = p.skipBlank(next); !ok {
		return 0, false, false
	}
	if next == len(p.lines) {
		return next, false, true
	}
	if ind := p.lines[next].ind; ind != col {
		return next, false, ind < col
	}
	return next, true, true
}

// mapping parses a block mapping whose first key is on line li at column
// col.
func (p *fyParser) mapping(li, col int) (node, next int, ok bool) {
	if p.depth++; p.depth > fyMaxDepth {
		return 0, 0, false
	}
	base := len(p.stack)
	for {
		ln := p.lines[li]
		key, after, k := p.key(ln.start+col, ln.end)
		if k != keyYes {
			return 0, 0, false
		}
		for after < ln.end && p.src[after] == ' ' {
			after++
		}
		var child int
		if child, next, ok = p.value(li, after, col, true); !ok {
			return 0, 0, false
		}
		p.nodes[child].key = key
		p.stack = append(p.stack, child)
		var more bool
		if next, more, ok = p.nextSibling(next, col); !ok {
			return 0, 0, false
		}
		if !more {
			break
		}
		li = next
	}
	p.depth--
	return p.collection(fnMap, base), next, true
}

const (
	keyNo = iota
	keyYes
	keyBad
)

// key reads a simple key at pos: it returns the decoded key and the
// position after its ':'. keyNo means there is no key (a scalar, say);
// keyBad that the line is outside the subset.
func (p *fyParser) key(pos, end int) (key fyKey, after int, k int) {
	src := p.src
	if pos >= end {
		return fyKey{}, 0, keyNo
	}
	if c := src[pos]; c == '"' || c == '\'' {
		start := len(p.kbuf)
		var i int
		var ok bool
		if p.kbuf, i, ok = p.quoted(p.kbuf, pos, end); !ok {
			return fyKey{}, 0, keyBad
		}
		key = fyKey{int32(start), int32(len(p.kbuf)), true}
		for i < end && src[i] == ' ' {
			i++
		}
		if i < end && src[i] == ':' {
			if i+1 == end || src[i+1] == ' ' {
				if i-pos > fyMaxKey {
					return fyKey{}, 0, keyBad
				}
				return key, i + 1, keyYes
			}
			if src[i+1] == '\t' {
				return fyKey{}, 0, keyBad
			}
		}
		p.kbuf = p.kbuf[:start]
		return fyKey{}, 0, keyNo
	}
	if !plainStart(src, pos, end) {
		return fyKey{}, 0, keyNo
	}
	for i := pos; i < end; i++ {
		switch src[i] {
		case ':':
			if i+1 == end || src[i+1] == ' ' {
				j := i
				for src[j-1] == ' ' {
					j--
				}
				if i-pos > fyMaxKey {
					return fyKey{}, 0, keyBad
				}
				key = fyKey{int32(pos), int32(j), false}
				// A key that is not a string (or a merge key) is left to yaml.v2.
				if kind, _, _, _ := resolvePlain(src[pos:j]); kind != kStr || string(src[pos:j]) == "<<" {
					return fyKey{}, 0, keyBad
				}
				return key, i + 1, keyYes
			}
			if src[i+1] == '\t' {
				return fyKey{}, 0, keyBad
			}
		case '\t':
			return fyKey{}, 0, keyBad
		case ' ':
			if i+1 < end && src[i+1] == '#' {
				return fyKey{}, 0, keyNo
			}
		}
	}
	return fyKey{}, 0, keyNo
}

// plainStart tells whether a plain scalar may start at pos in block context.
func plainStart(src []byte, pos, end int) bool {
	switch src[pos] {
	case '-':
		return pos+1 < end && src[pos+1] != ' ' && src[pos+1] != '\t'
	case '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', ' ', '\t':
		return false
	}
	return true
}

// value parses what follows "key:" or "- " at v on line li; ci is the
// indent of the enclosing collection.
func (p *fyParser) value(li, v, ci int, inMap bool) (node, next int, ok bool) {
	src := p.src
	ln := p.lines[li]
	if v == ln.end || src[v] == '#' {
		next, ok = p.skipBlank(li + 1)
		if !ok {
			return 0, 0, false
		}
		if next < len(p.lines) {
			nl := p.lines[next]
			if nl.ind > ci {
				return p.block(next, nl.ind)
			}
			if nl.ind == ci && inMap {
				switch p.entry(nl.start+ci, nl.end) {
				case 1:
					return p.seq(next, ci)
				case -1:
					return 0, 0, false
				}
			}
		}
		p.sbuf = append(p.sbuf, "null"...)
		return p.scalar(len(p.sbuf) - 4), next, true
	}
	switch src[v] {
	case '|', '>':
		return p.blockScalar(li, v, ci)
	case '"', '\'':
		var end int
		p.tmp, end, ok = p.quoted(p.tmp[:0], v, ln.end)
		if !ok || !p.lineDone(end, ln.end) {
			return 0, 0, false
		}
		start := len(p.sbuf)
		p.sbuf = appendJSONString(p.sbuf, p.tmp)
		return p.scalar(start), li + 1, true
	case '[', '{':
		return p.flow(li, v)
	}
	if !plainStart(src, v, ln.end) {
		return 0, 0, false
	}
	last := v
	for i := v; i < ln.end; i++ {
		switch src[i] {
		case ':':
			if i+1 == ln.end || src[i+1] == ' ' || src[i+1] == '\t' {
				return 0, 0, false
			}
		case '\t':
			return 0, 0, false
		case ' ':
			if i+1 < ln.end && src[i+1] == '#' {
				i = ln.end
			}
			continue
		}
		last = i + 1
	}
	start := len(p.sbuf)
	if p.sbuf, ok = appendPlain(p.sbuf, src[v:last]); !ok {
		return 0, 0, false
	}
	return p.scalar(start), li + 1, true
}

// lineDone tells whether only spaces and a comment follow pos.
func (p *fyParser) lineDone(pos, end int) bool {
	i := pos
	for i < end && p.src[i] == ' ' {
		i++
	}
	return i == end || (p.src[i] == '#' && i > pos)
}

// quoted decodes the one-line quoted scalar at pos and appends it to dst.
// It returns the position after the closing quote; ok is false when the
// scalar does not end on the line or has a bad escape.
func (p *fyParser) quoted(dst []byte, pos, end int) (out []byte, after int, ok bool) {
	src := p.src
	if src[pos] == '\'' {
		for i := pos + 1; i < end; i++ {
			if src[i] == '\'' {
				if i+1 < end && src[i+1] == '\'' {
					dst = append(dst, '\'')
					i++
					continue
				}
				return dst, i + 1, true
			}
			dst = append(dst, src[i])
		}
		return dst, 0, false
	}
	for i := pos + 1; i < end; i++ {
		c := src[i]
		if c == '"' {
			return dst, i + 1, true
		}
		if c != '\\' {
			dst = append(dst, c)
			continue
		}
		if i++; i == end {
			return dst, 0, false // an escaped line break
		}
		n := 0
		switch src[i] {
		case '0':
			dst = append(dst, 0)
		case 'a':
			dst = append(dst, '\a')
		case 'b':
			dst = append(dst, '\b')
		case 't', '\t':
			dst = append(dst, '\t')
		case 'n':
			dst = append(dst, '\n')
		case 'v':
			dst = append(dst, '\v')
		case 'f':
			dst = append(dst, '\f')
		case 'r':
			dst = append(dst, '\r')
		case 'e':
			dst = append(dst, 0x1b)
		case ' ', '"', '\'', '\\':
			dst = append(dst, src[i])
		case 'N':
			dst = append(dst, "\u0085"...)
		case '_':
			dst = append(dst, "\u00a0"...)
		case 'L':
			dst = append(dst, "\u2028"...)
		case 'P':
			dst = append(dst, "\u2029"...)
		case 'x':
			n = 2
		case 'u':
			n = 4
		case 'U':
			n = 8
		default:
			return dst, 0, false
		}
		if n == 0 {
			continue
		}
		if i+n >= end {
			return dst, 0, false
		}
		r := 0
		for _, h := range src[i+1 : i+1+n] {
			switch {
			case h >= '0' && h <= '9':
				r = r<<4 | int(h-'0')
			case h >= 'a' && h <= 'f':
				r = r<<4 | int(h-'a'+10)
			case h >= 'A' && h <= 'F':
				r = r<<4 | int(h-'A'+10)
			default:
				return dst, 0, false
			}
		}
		if (r >= 0xd800 && r <= 0xdfff) || r > 0x10ffff {
			return dst, 0, false
		}
		if r < utf8.RuneSelf {
			dst = append(dst, byte(r)) // as libyaml writes it, whatever it is
		} else {
			dst = utf8.AppendRune(dst, rune(r))
		}
		i += n
	}
	return dst, 0, false
}

// blockScalar parses a literal or folded block scalar whose header is at v
// on line li, mirroring libyaml's scanner; ci is the enclosing indent.
func (p *fyParser) blockScalar(li, v, ci int) (node, next int, ok bool) {
	src := p.src
	ln := p.lines[li]
	literal := src[v] == '|'
	chomp := 0
	i := v + 1
	if i < ln.end && (src[i] == '-' || src[i] == '+') {
		chomp = -1
		if src[i] == '+' {
			chomp = 1
		}
		i++
	}
	if i < ln.end && src[i] != ' ' && src[i] != '#' {
		return 0, 0, false // an indentation indicator, or junk
	}
	for i < ln.end && src[i] == ' ' {
		i++
	}
	if i < ln.end && src[i] != '#' {
		return 0, 0, false
	}

	s := p.tmp[:0]
	k := li + 1
	indent, trailing := 0, 0
	if !p.blockBreaks(&k, &indent, &trailing, ci) {
		return 0, 0, false
	}
	leadingBreak, leadingBlank := false, false
	for k < len(p.lines) {
		l := p.lines[k]
		pos := l.start + min(l.ind, indent)
		if l.ind < indent || pos == l.end {
			break
		}
		trailingBlank := src[pos] == ' ' || src[pos] == '\t'
		if !literal && leadingBreak && !leadingBlank && !trailingBlank {
			if trailing == 0 {
				s = append(s, ' ')
			}
		} else if leadingBreak {
			s = append(s, '\n')
		}
		for ; trailing > 0; trailing-- {
			s = append(s, '\n')
		}
		leadingBlank = trailingBlank
		s = append(s, src[pos:l.end]...)
		leadingBreak = l.nl
		k++
		if !p.blockBreaks(&k, &indent, &trailing, ci) {
			return 0, 0, false
		}
	}
	if chomp != -1 && leadingBreak {
		s = append(s, '\n')
	}
	if chomp == 1 {
		for ; trailing > 0; trailing-- {
			s = append(s, '\n')
		}
	}
	p.tmp = s
	start := len(p.sbuf)
	p.sbuf = appendJSONString(p.sbuf, s)
	return p.scalar(start), k, true
}

// blockBreaks skips the empty lines of a block scalar from line *k on,
// counting them in *trailing, and sets *indent if it is not known yet.
func (p *fyParser) blockBreaks(k, indent, trailing *int, ci int) bool {
	maxInd := 0
	for ; *k < len(p.lines); *k++ {
		l := p.lines[*k]
		col := l.ind
		if *indent != 0 && col > *indent {
			col = *indent
		}
		maxInd = max(maxInd, col)
		pos := l.start + col
		if pos < l.end {
			if (*indent == 0 || col < *indent) && p.src[pos] == '\t' {
				return false
			}
			break
		}
		if !l.nl {
			break
		}
		*trailing++
	}
	if *indent == 0 {
		*indent = max(maxInd, ci+1, 1)
	}
	return true
}

// flow parses a one-line flow sequence or mapping of scalars at v.
func (p *fyParser) flow(li, v int) (node, next int, ok bool) {
	src := p.src
	end := p.lines[li].end
	isMap := src[v] == '{'
	closer := byte(']')
	if isMap {
		closer = '}'
	}
	base := len(p.stack)
	i := p.flowSpace(v+1, end)
	if i < end && src[i] == closer {
		i++
	} else {
		for {
			var key fyKey
			if isMap {
				var str bool
				start := len(p.kbuf)
				if p.kbuf, i, str, ok = p.flowScalar(p.kbuf, i, end, true); !ok || !str {
					return 0, 0, false
				}
				key = fyKey{int32(start), int32(len(p.kbuf)), true}
				i = p.flowSpace(i, end)
				if i+1 >= end || src[i] != ':' || src[i+1] != ' ' {
					return 0, 0, false
				}
				i = p.flowSpace(i+1, end)
			}
			start := len(p.sbuf)
			if p.sbuf, i, _, ok = p.flowScalar(p.sbuf, i, end, false); !ok {
				return 0, 0, false
			}
			child := p.scalar(start)
			p.nodes[child].key = key
			p.stack = append(p.stack, child)
			i = p.flowSpace(i, end)
			if i >= end {
				return 0, 0, false
			}
			if src[i] == closer {
				i++
				break
			}
			if src[i] != ',' {
				return 0, 0, false
			}
			i = p.flowSpace(i+1, end)
		}
	}
	if !p.lineDone(i, end) {
		return 0, 0, false
	}
	kind := uint8(fnSeq)
	if isMap {
		kind = fnMap
	}
	return p.collection(kind, base), li + 1, true
}

func (p *fyParser) flowSpace(i, end int) int {
	for i < end && p.src[i] == ' ' {
		i++
	}
	return i
}

// flowScalar reads a quoted scalar, or a plain one of a few safe
// characters, at i in a flow collection. As a key (raw) it appends the
// decoded string, else the JSON text. str tells whether it is a string.
func (p *fyParser) flowScalar(dst []byte, i, end int, raw bool) (out []byte, after int, str bool, ok bool) {
	src := p.src
	if i >= end {
		return dst, 0, false, false
	}
	if c := src[i]; c == '"' || c == '\'' {
		if !raw {
			p.tmp, after, ok = p.quoted(p.tmp[:0], i, end)
			return appendJSONString(dst, p.tmp), after, true, ok
		}
		dst, after, ok = p.quoted(dst, i, end)
		return dst, after, true, ok
	}
	j := i
	for j < end && flowSafe(src[j]) {
		j++
	}
	if j == i || (src[i] == '-' && (j == end || src[j] == ' ')) {
		return dst, 0, false, false
	}
	tok := src[i:j]
	if raw {
		if kind, _, _, _ := resolvePlain(tok); kind != kStr {
			return dst, 0, false, false
		}
		return append(dst, tok...), j, true, true
	}
	dst, ok = appendPlain(dst, tok)
	return dst, j, true, ok
}

func flowSafe(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '.' || c == '/' || c == '-' || c == '+' || c == '~'
}

// emit writes node n as JSON: members sorted by key as encoding/json sorts
// a map's. ok is false for duplicate keys.
func (p *fyParser) emit(dst []byte, n int) ([]byte, bool) {
	nd := &p.nodes[n]
	switch nd.kind {
	case fnScalar:
		return append(dst, p.sbuf[nd.vs:nd.ve]...), true
	case fnSeq:
		dst = append(dst, '[')
		for i, k := range p.kids[nd.first : nd.first+nd.n] {
			if i > 0 {
				dst = append(dst, ',')
			}
			var ok bool
			if dst, ok = p.emit(dst, k); !ok {
				return dst, false
			}
		}
		return append(dst, ']'), true
	}
	kids := p.kids[nd.first : nd.first+nd.n]
	slices.SortFunc(kids, func(a, b int) int { return bytes.Compare(p.keyBytes(p.nodes[a].key), p.keyBytes(p.nodes[b].key)) })
	dst = append(dst, '{')
	for i, k := range kids {
		if i > 0 {
			if bytes.Equal(p.keyBytes(p.nodes[kids[i-1]].key), p.keyBytes(p.nodes[k].key)) {
				return dst, false
			}
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, p.keyBytes(p.nodes[k].key))
		dst = append(dst, ':')
		var ok bool
		if dst, ok = p.emit(dst, k); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

// Kinds of plain scalars, as yaml.v2 resolves them.
const (
	kStr = iota
	kNull
	kTrue
	kFalse
	kInt
	kUint
	kFloat
	kBad // NaN and infinities, which JSON cannot hold
)

// resolveHint is yaml.v2's table of first characters worth resolving.
var resolveHint = func() (t [256]byte) {
	t['+'], t['-'] = 'S', 'S'
	for c := '0'; c <= '9'; c++ {
		t[c] = 'D'
	}
	for _, c := range "yYnNtTfFoO~" {
		t[c] = 'M'
	}
	t['.'] = '.'
	return t
}()

// resolvePlain resolves a non-empty plain scalar as yaml.v2's resolve does
// for an untagged one (timestamps stay strings when decoded into
// interface{}).
func resolvePlain(s []byte) (kind int, i int64, u uint64, f float64) {
	hint := resolveHint[s[0]]
	if hint == 0 {
		return kStr, 0, 0, 0
	}
	switch string(s) {
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		return kTrue, 0, 0, 0
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		return kFalse, 0, 0, 0
	case "~", "null", "Null", "NULL":
		return kNull, 0, 0, 0
	case ".nan", ".NaN", ".NAN", ".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF":
		return kBad, 0, 0, 0
	}
	// No strconv parse below can succeed with other characters; checking
	// first saves their error allocations on strings like "8Gi".
	for _, c := range s {
		if !numChar[c] {
			return kStr, 0, 0, 0
		}
	}
	switch hint {
	case '.':
		if f, err := strconv.ParseFloat(string(s), 64); err == nil {
			return kFloat, 0, 0, f
		}
	case 'D', 'S':
		// yaml.v2 first keeps timestamps as strings, but no timestamp (4
		// digits, then '-') parses as a number below anyway.
		var buf [64]byte
		plain := buf[:0]
		for _, c := range s {
			if c != '_' {
				plain = append(plain, c)
			}
		}
		if !numberShaped(plain) {
			return kStr, 0, 0, 0
		}
		if i, err := strconv.ParseInt(string(plain), 0, 64); err == nil {
			return kInt, i, 0, 0
		}
		if u, err := strconv.ParseUint(string(plain), 0, 64); err == nil {
			return kUint, 0, u, 0
		}
		if yamlStyleFloat(plain) {
			if f, err := strconv.ParseFloat(string(plain), 64); err == nil {
				return kFloat, 0, 0, f
			}
		}
		if bytes.HasPrefix(plain, []byte("0b")) {
			if i, err := strconv.ParseInt(string(plain[2:]), 2, 64); err == nil {
				return kInt, i, 0, 0
			}
			if u, err := strconv.ParseUint(string(plain[2:]), 2, 64); err == nil {
				return kUint, 0, u, 0
			}
		} else if bytes.HasPrefix(plain, []byte("-0b")) {
			plain[2] = '-'
			if i, err := strconv.ParseInt(string(plain[2:]), 2, 64); err == nil {
				return kInt, i, 0, 0
			}
		}
	}
	return kStr, 0, 0, 0
}

var numChar = func() (t [256]bool) {
	for _, c := range "0123456789abcdefABCDEFxXoO+-._" {
		t[c] = true
	}
	return t
}()

// numberShaped tells whether s (without underscores) may be one of the
// numbers yaml.v2 parses, so that strings like UUIDs skip the strconv calls.
func numberShaped(s []byte) bool {
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	if len(s)-i > 2 && s[i] == '0' {
		max := byte(0)
		switch s[i+1] {
		case 'x', 'X':
			max = 'f'
		case 'o', 'O':
			max = '7'
		case 'b', 'B':
			max = '1'
		}
		if max != 0 {
			j := i + 2
			if max == '1' && (s[j] == '+' || s[j] == '-') {
				j++ // yaml.v2's own 0b parsing takes a sign there
			}
			if j == len(s) {
				return false
			}
			for _, c := range s[j:] {
				d := c
				if max == 'f' && c >= 'A' && c <= 'F' {
					d = c - 'A' + 'a'
				}
				if d < '0' || d > max || (d > '9' && d < 'a') {
					return false
				}
			}
			return true
		}
	}
	return yamlStyleFloat(s)
}

// yamlStyleFloat matches ^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$
func yamlStyleFloat(s []byte) bool {
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	} else {
		if digits() == 0 {
			return false
		}
		if i < len(s) && s[i] == '.' {
			i++
			digits()
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '-' || s[i] == '+') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// appendPlain appends the JSON of a plain scalar; ok is false for values
// JSON cannot hold.
func appendPlain(dst, s []byte) ([]byte, bool) {
	kind, i, u, f := resolvePlain(s)
	switch kind {
	case kStr:
		return appendJSONString(dst, s), true
	case kNull:
		return append(dst, "null"...), true
	case kTrue:
		return append(dst, "true"...), true
	case kFalse:
		return append(dst, "false"...), true
	case kInt:
		return strconv.AppendInt(dst, i, 10), true
	case kUint:
		return strconv.AppendUint(dst, u, 10), true
	case kFloat:
		return appendJSONFloat(dst, f)
	}
	return dst, false
}

// appendJSONFloat formats f as encoding/json formats a float64.
func appendJSONFloat(dst []byte, f float64) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' {
		// e-07 becomes e-7.
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// appendJSONString quotes s as encoding/json does with HTML escaping on.
func appendJSONString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// jsonSafe marks the ASCII bytes encoding/json writes as they are.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	t['"'], t['\\'], t['<'], t['>'], t['&'] = false, false, false, false, false
	return t
}()
