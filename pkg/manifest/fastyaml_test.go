package manifest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	sigsyaml "sigs.k8s.io/yaml"
)

// Whether a table input must take the fast path.
const (
	fast = iota // in the subset: ok must be true
	slow        // outside it: ok must be false
	any_        // either, as long as the result is right
)

var fastYAMLCases = []struct {
	name string
	in   string
	want int
}{
	{"empty", "", fast},
	{"comments only", "# a\n\n  # b\n", fast},
	{"blank with spaces", "  \n    \n", fast},
	{"leading separator", "---\na: 1\n", fast},
	{"leading separator comment", "# c\n--- # x\na: 1\n", fast},
	{"only separator", "---\n", fast},
	{"two separators", "---\n---\na: 1\n", slow},
	{"separator later", "a: 1\n---\nb: 2\n", slow},
	{"document end", "a: 1\n...\n", slow},
	{"separator with content", "--- a: 1\n", slow},
	{"directive", "%YAML 1.1\n---\na: 1\n", slow},
	{"simple map", "b: 2\na: 1\nc: x\n", fast},
	{"no final newline", "a: 1\nb: text", fast},
	{"nested", "a:\n  b:\n    c: d\n  e: f\ng: h\n", fast},
	{"indented root", "  a: 1\n  b: 2\n", fast},
	{"dedent below root", "  a: 1\nb: 2\n", slow},
	{"over-indented key", "a: 1\n  b: 2\n", slow},
	{"sequence", "- a\n- b\n- 3\n", fast},
	{"compact sequence", "a:\n- x\n- y\nb: 1\n", fast},
	{"indented sequence", "a:\n  - x\n  - y\nb: 1\n", fast},
	{"nested sequences", "- - a\n  - b\n- - - c\n-\n  - d\n", fast},
	{"sequence of maps", "- a: 1\n  b: 2\n- c: 3\n-   d: 4\n    e: 5\n", fast},
	{"map in seq in map", "x:\n- a:\n  - 1\n  b: 2\n- c\nz: 3\n", fast},
	{"empty items", "- \n-\n- # c\n- a\n", fast},
	{"empty values", "a:\nb: # c\nc: ~\nd: null\ne: Null\nf: NULL\n", fast},
	{"empty value then dedent", "a:\n  b:\nc: 1\n", fast},
	{"seq item dedent", "- a: 1\n b: 2\n", slow},
	{"bad seq continuation", "a:\n- x\n  - y\n", slow},
	{"seq after scalar", "a: 1\n- x\n", slow},
	{"dash key after seq", "a:\n- x\n-foo: y\n", fast},
	{"comments everywhere", "# head\na: 1 # trailing\n  # indented\nb: # c\n  - x # c\n  # c\n  - y\nc: 'q' # c\nd: \"q\" # c\ne: a#b\nf: a #b\n", fast},
	{"hash without space", "a: 'x'#c\n", slow},
	{"quoted with colon and hash", "a: \"b: c # d\"\nb: 'e: f # g'\n", fast},
	{"keys with dots and slashes", "app.kubernetes.io/name: x\nexample.com/a-b_c: y\n\"quoted key\": z\n'single: key': w\n", fast},
	{"key spacing", "a  : 1\n\"b\" : 2\n", fast},
	{"colon in value", "url: http://example.com:8080/x\nt: 12:30\nu: a:b\n", fast},
	{"colon space in value", "a: b: c\n", slow},
	{"trailing colon in value", "a: b:\n", slow},
	{"booleans", "a: yes\nb: No\nc: ON\nd: off\ne: y\nf: N\ng: true\nh: False\ni: TRUE\nj: yEs\nk: oN\n", fast},
	{"quoted booleans", "a: \"yes\"\nb: 'no'\nc: \"true\"\n", fast},
	{"integers", "a: 0\nb: -1\nc: +5\nd: 0777\ne: 0x1F\nf: 1_000\ng: 0b101\nh: -0x10\ni: 0o17\nj: 09\nk: 9223372036854775807\nl: 9223372036854775808\nm: 18446744073709551616\nm2: -9223372036854775809\no: 1__\np: 00\n", fast},
	{"number-like strings", "a: 4f1e2a8c-1b2d-4c3e-9f00-123456789abc\nb: 0b-1\nc: 0b+1\nd: -0b-1\ne: 0B11\nf: 0x\ng: 0b\nh: 0xG\ni: 0o8\nj: 0b12\nk: 0x_1F\nl: 1e\nm: 1e+\nm2: +\no: -_1\np: 12e3.4\n", fast},
	{"floats", "a: 1.5\nb: -0.0\nc: .5\nd: 1e3\ne: 1.0e-7\nf: 6.02e23\ng: 1e21\nh: 1.\ni: 1_000.5\nj: 1e400\nk: .\nl: 1.2.3\nm: +.5\nm2: 0.000001\no: 1e-06\np: 123456789012345678901234\n", fast},
	{"special floats", "a: .inf\n", slow},
	{"nan", "a: .NaN\n", slow},
	{"odd specials", "a: .iNf\nb: -.Inf5\nc: inf\nd: nan\n", fast},
	{"timestamps", "a: 2001-12-14\nb: 2001-12-14t21:59:43.10-05:00\nc: 2001-12-14 21:59:43.10\nd: 2024-01-01T00:00:00Z\n", fast},
	{"quantities and versions", "a: 8Gi\nb: 500m\nc: 1.6.iso\nd: v1\ne: 3.4.0\nf: 1Mi\ng: 0.5\n", fast},
	{"html escapes", "a: <b> & </b>\nb: \"\\u2028\\u2029\"\n\"<k>\": '&'\n", fast},
	{"double-quoted escapes", "a: \"\\0\\a\\b\\t\\n\\v\\f\\r\\e\\ \\\"\\/\\\\\"\n", slow},
	{"double-quoted escapes ok", "a: \"\\0\\a\\b\\t\\n\\v\\f\\r\\e\\ \\\"\\'\\\\\\N\\_\\L\\P\\x41\\xe9\\u00e9\\U0001F600\"\n", fast},
	{"bad escape", "a: \"\\q\"\n", slow},
	{"surrogate escape", "a: \"\\ud800\"\n", slow},
	{"multi-line double-quoted", "a: \"b\n  c\"\n", slow},
	{"multi-line single-quoted", "a: 'b\n  c'\n", slow},
	{"multi-line plain", "a: b\n  c\n", slow},
	{"quoted then junk", "a: \"b\" c\n", slow},
	{"single quotes", "a: 'it''s'\nb: ''\nc: '  spaced  '\n", fast},
	{"unicode", "名前: 値\nemoji: 🚀 launch\nnbsp: a\u00a0b\n", fast},
	{"unicode line separator", "a: b\u2028c\n", slow},
	{"nel", "a: b\u0085c\n", slow},
	{"bom", "\ufeffa: 1\n", slow},
	{"crlf", "a: 1\r\nb: |\r\n  x\r\n  \r\n  y\r\nc: >+\r\n  z\r\n\r\n  w\r\n\r\n", fast},
	{"crlf no final newline", "a: 1\r\nb: 2\r", slow},
	{"lone cr", "a: 1\rb: 2\n", slow},
	{"cr in value", "a: b\rc\n", slow},
	{"control character", "a: b\x01c\n", slow},
	{"invalid utf-8", "a: b\xffc\n", slow},
	{"del", "a: b\x7fc\n", slow},
	{"tab indentation", "a:\n\tb: 1\n", slow},
	{"tab after colon", "a:\t1\n", slow},
	{"tab in value", "a: b\tc\n", slow},
	{"tab in quotes", "a: \"b\tc\"\nb: 'd\te'\n", fast},
	{"literal", "a: |\n  line 1\n    indented\n\n  line 3\nb: 1\n", fast},
	{"literal strip", "a: |-\n  x\n  y\n\n\nb: 1\n", fast},
	{"literal keep", "a: |+\n  x\n\n\nb: 1\n", fast},
	{"literal keep at end", "a: |+\n  x\n\n", fast},
	{"literal no final newline", "a: |\n  x", fast},
	{"literal empty", "a: |\nb: 1\n", fast},
	{"literal empty at end", "a: |\n", fast},
	{"literal leading blank lines", "a: |\n\n\n  x\n", fast},
	{"literal too-long blank line", "a: |\n     \n  x\n", any_},
	{"literal spaces-only lines", "a: |\n  x\n     \n  y\n   \nb: 1\n", fast},
	{"literal with comment-like lines", "a: |\n  # not a comment\n  b: c\n# a comment\nd: 1\n", fast},
	{"literal header comment", "a: | # c\n  x\nb: |#c\n  y\n", fast},
	{"literal in sequence", "- |\n  x\n- |-\n   y\n", fast},
	{"literal in compact sequence", "k:\n- |\n  x\n  y\n- z\n", fast},
	{"literal in seq map", "- a: |\n    x\n  b: 1\n", fast},
	{"literal with tab", "a: |\n  x\n  \ty\n", fast},
	{"literal starting with tab", "a: |\n  \tx\n", slow},
	{"literal tab indent", "a: |\n\tx\n", slow},
	{"literal indent indicator", "a: |2\n   x\n", slow},
	{"literal too little indent", "a:\n  b: |\n  x: 1\n", fast},
	{"folded", "a: >\n  one\n  two\n\n  three\n    more\n  four\nb: >-\n  x\n  y\n", fast},
	{"folded keep", "a: >+\n  x\n\n", fast},
	{"folded less indented", "a: >\n   x\n  y\n", slow},
	{"folded leading spaces", "a: >\n  x\n   y\n  z\n\n   w\n  \tv\n  u\n", fast},
	{"flow empty", "a: {}\nb: []\nc: { }\nd: [ ]\n", fast},
	{"flow seq", "a: [a, b, 1, true, ~, \"q\", 'r']\nb: [ x ]\nc: [\"sh\",\"-c\"]\n", fast},
	{"flow map", "a: {x: 1, z: \"z\", 'w': v}\n", fast},
	{"flow dup key", "a: {x: 1, x: 2}\n", slow},
	{"flow nested", "a: [[1]]\n", slow},
	{"flow multi-line", "a: [1,\n  2]\n", slow},
	{"flow trailing comma", "a: [1, 2,]\n", slow},
	{"flow dash", "a: [-, -1, -a]\n", fast},
	{"flow dash space", "a: [- ]\n", slow},
	{"flow in seq", "- []\n- {}\n- [a]\n", fast},
	{"flow root", "[a, b]\n", slow},
	{"flow non-string key", "a: {1: x}\n", slow},
	{"anchors", "a: &x 1\nb: *x\n", slow},
	{"tag", "a: !!str 1\n", slow},
	{"merge", "a: {x: 1}\n<<: {y: 2}\n", slow},
	{"quoted merge key", "'<<': 1\n", fast},
	{"complex key", "? a\n: b\n", slow},
	{"duplicate keys", "a: 1\na: 2\n", slow},
	{"duplicate keys quoted", "a: 1\n\"a\": 2\n", slow},
	{"int key", "1: a\n", slow},
	{"bool key", "yes: a\n", slow},
	{"null key", "~: a\n", slow},
	{"quoted int key", "\"1\": a\n'yes': b\n", fast},
	{"root scalar", "hello\n", slow},
	{"root quoted", "\"hello\"\n", slow},
	{"key only", "a\n", slow},
	{"indicators", "a: @x\n", slow},
	{"backtick", "a: `x`\n", slow},
	{"percent", "a: %x\n", slow},
	{"question value", "a: ?x\n", slow},
	{"value with braces", "a: x{y}[z],w\n", fast},
	{"dash value", "a: -x\nb: -\n", any_},
	{"long key", strings.Repeat("k", 1100) + ": v\n", slow},
	{"deep", strings.Repeat("- ", 300) + "x\n", slow},
	{"moderately deep", strings.Repeat("- ", 50) + "x\n", fast},
	{"document marker in literal", "a: |\n  x\n---\n", slow},
	{"hash key", "a#b: c\n", fast},
	{"key with comment", "a #b: c\n", slow},
	{"spaces in plain", "a: b  c   d   \n", fast},
	{"json-like", "{\"a\": 1}\n", slow},
}

// checkFast compares fastYAMLToJSON with sigs.k8s.io/yaml's strict mode,
// YAMLToJSON's fallback, on in.
func checkFast(t *testing.T, in []byte, want int) {
	t.Helper()
	got, ok := fastYAMLToJSON(in)
	ref, err := sigsyaml.YAMLToJSONStrict(in)
	if ok {
		if err != nil {
			t.Fatalf("fast path accepted what sigs.k8s.io/yaml rejects (%v); input:\n%s", err, in)
		}
		if !bytes.Equal(got, ref) {
			t.Fatalf("fast path differs; input:\n%s\ngot:  %s\nwant: %s", in, got, ref)
		}
	}
	switch {
	case want == fast && !ok:
		t.Fatalf("fast path not taken (sigs.k8s.io/yaml: %s, %v); input:\n%s", ref, err, in)
	case want == slow && ok:
		t.Fatalf("fast path taken, expected the fallback; input:\n%s", in)
	}
	w, werr := YAMLToJSON(in)
	if !bytes.Equal(w, ref) || (werr == nil) != (err == nil) {
		t.Fatalf("YAMLToJSON = %s, %v; want %s, %v", w, werr, ref, err)
	}
}

func TestFastYAMLToJSON(t *testing.T) {
	for _, c := range fastYAMLCases {
		t.Run(c.name, func(t *testing.T) { checkFast(t, []byte(c.in), c.want) })
	}
}

// splitDocs splits a stream as Reader does.
func splitDocs(t testing.TB, stream []byte) [][]byte {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(stream)))
	var docs [][]byte
	for {
		d, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatal(err)
		}
		if !isEmpty(d) {
			docs = append(docs, d)
		}
	}
}

// manifestFiles are realistic manifests, which must take the fast path.
func manifestFiles(t testing.TB) []string {
	var files []string
	for _, g := range []string{"../../examples/*.yaml", "../../examples/*/*.yaml", "testdata/fastyaml/*.yaml"} {
		m, err := filepath.Glob(g)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 2 {
		t.Fatalf("no manifests found: %v", files)
	}
	return files
}

func TestFastYAMLToJSONManifests(t *testing.T) {
	for _, f := range manifestFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs := splitDocs(t, b)
			if len(docs) == 0 {
				t.Fatal("no documents")
			}
			for _, d := range docs {
				checkFast(t, d, fast)
			}
		})
	}
}

// TestFastYAMLToJSONOwnOutput feeds what JSONToYAML writes for a typical
// StatefulSet back in: rendered output must take the fast path too.
func TestFastYAMLToJSONOwnOutput(t *testing.T) {
	sts := &appsv1.StatefulSet{
		TypeMeta: metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "test-vm", Namespace: "vmop-demo",
			Labels:      map[string]string{"app.kubernetes.io/name": "vm-runner", "app.kubernetes.io/instance": "test-vm"},
			Annotations: map[string]string{"vmoperator.jdrupes.org/cpus": "2", "note": "yes", "html": "<b>&</b>", "multi": "line 1\nline 2\n"},
		},
		Spec: appsv1.StatefulSetSpec{
			Replicas:    ptr.To[int32](1),
			ServiceName: "test-vm",
			Selector:    &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/instance": "test-vm"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/instance": "test-vm"}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name:    "runner",
						Image:   "ghcr.io/mnlipp/org.jdrupes.vmoperator.runner.qemu-arch:3.4.0",
						Args:    []string{"--config", "/etc/opt/vmrunner/config.yaml", "", "0777", "1e3", "on"},
						Env:     []corev1.EnvVar{{Name: "A", Value: "x: y # z"}, {Name: "B", Value: " padded "}, {Name: "C", Value: "tab\there"}},
						Ports:   []corev1.ContainerPort{{Name: "spice", ContainerPort: 5910, Protocol: corev1.ProtocolTCP}},
						Command: []string{"/bin/sh", "-c", "set -e\nexec runner \"$@\"\n"},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("5Gi")},
						},
						SecurityContext: &corev1.SecurityContext{
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							Privileged:   ptr.To(false),
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "runtime", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "test-vm"}, DefaultMode: ptr.To[int32](0o644)}}},
					},
				},
			},
			VolumeClaimTemplates: []corev1.PersistentVolumeClaim{{
				ObjectMeta: metav1.ObjectMeta{Name: "vm-data"},
				Spec: corev1.PersistentVolumeClaimSpec{
					AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				},
			}},
		},
	}
	j, err := json.Marshal(sts)
	if err != nil {
		t.Fatal(err)
	}
	y, err := JSONToYAML(nil, j)
	if err != nil {
		t.Fatal(err)
	}
	checkFast(t, y, fast)
}

func TestFastYAMLToJSONConcurrent(t *testing.T) {
	in := []byte("a: 1\nb:\n- x\n- c: |\n    z\n")
	want, _ := sigsyaml.YAMLToJSON(in)
	done := make(chan bool)
	for range 4 {
		go func() {
			ok := true
			for range 1000 {
				got, fast := fastYAMLToJSON(in)
				ok = ok && fast && bytes.Equal(got, want)
			}
			done <- ok
		}()
	}
	for range 4 {
		if !<-done {
			t.Fatal("wrong result under concurrent use")
		}
	}
}

func FuzzYAMLToJSON(f *testing.F) {
	for _, c := range fastYAMLCases {
		f.Add([]byte(c.in))
	}
	for _, c := range hostileYAML {
		if len(c.in) <= 4<<10 { // the 100k nestings would slow every round
			f.Add([]byte(c.in))
		}
	}
	f.Add([]byte(strings.Repeat("[", 10_001)))
	for _, file := range manifestFiles(f) {
		b, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, d := range splitDocs(f, b) {
			f.Add(d)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if _, err := YAMLToJSON(in); err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("the error is not one line: %q; input: %q", err, in)
		}
		fuzzCompare(t, in)
		// Random bytes seldom make YAML the fast path takes; documents
		// built from the same bytes as choices explore the subset better.
		fuzzCompare(t, genYAML(in))
		// The first line as a scalar, block and flow, to try resolution.
		line, _, _ := bytes.Cut(in, []byte("\n"))
		fuzzCompare(t, append([]byte("k: "), line...))
		fuzzCompare(t, append(append([]byte("k: ["), line...), ']'))
	})
}

func fuzzCompare(t *testing.T, in []byte) {
	got, ok := fastYAMLToJSON(in)
	if !ok {
		return
	}
	ref, err := sigsyaml.YAMLToJSONStrict(in)
	if err != nil {
		t.Fatalf("fast path accepted what sigs.k8s.io/yaml rejects (%v); input: %q", err, in)
	}
	if !bytes.Equal(got, ref) {
		t.Fatalf("fast path differs; input: %q\ngot:  %s\nwant: %s", in, got, ref)
	}
}

// Pieces genYAML builds documents from: mostly in the subset, some just
// outside it.
var (
	genKeys = []string{"a", "b", "c", "d", "app.kubernetes.io/name", "x/y", `"q k"`, "'s k'", `"a"`, "y", "1", "<<", "'<<'",
		"-k", "a b", "ключ", "k#x", "~", `""`, "a:b", "on", "null", "Yes", `"<&>"`, "'1'", "8Gi", "0x1", ".5", "-", "a  ", "?x", `k"q`}
	genValues = []string{"x", "1", "0", "-1", "+1", "0777", "0x1f", "0X1F", "1_000", "1.5", "1e3", "1E-7", ".5", "-.5", "1.", "-", "--", "-x",
		"yes", "No", "ON", "off", "y", "n", "true", "False", "~", "null", "NULL", "2001-12-14", "2001-12-14 21:59:43.10", "8Gi", "500m",
		`"q"`, `"a: b # c"`, "'s''q'", "''", `""`, `"\u00e9\t\x41\U0001F600"`, `"\L\P\N\_"`, `"\/"`, `"\q"`, `"\ud800"`,
		"{}", "[]", "[a, 1]", "[ ]", "{ }", "{a: 1, b: x}", `["sh", "-c"]`, "[-, -1]", "{a: 1, a: 2}", "[[1]]", "[a,]", "{1: x}",
		"# c", "a #c", "a#b", "<b>&</b>", "🚀 x", "a: b", "&x a", "*x", "!t a", "x:", "a ", "x  y",
		"http://x:1/y", "9223372036854775807", "9223372036854775808", "18446744073709551616", "-9223372036854775809",
		"1e400", ".inf", "-.Inf", ".nan", "0b11", "-0b11", "0o7", "09", "1__", "-.5e-7", "6.02e23", "1e21", "123456789012345678901234",
		`"a" #c`, `'a'#c`, "1.2.3", "@", "`", "%", "a\tb", "\u00a0", "a\u2028b", "\"x", "{a: 1", "[a", "|", ">", "? x", "- x"}
	genBlockHeaders = []string{"|", "|-", "|+", ">", ">-", ">+", "| # c", "|2", "|#c"}
	genBlockLines   = []string{"text", "more text", "# not a comment", "a: b", "- x", "\ttab", "<&>", " ", "", "x  "}
)

// yamlGen builds a YAML document, taking its choices from b.
type yamlGen struct {
	b     []byte
	lines []string
	cur   []byte
}

func (g *yamlGen) pick(n int) int {
	if len(g.b) == 0 {
		return 0
	}
	c := int(g.b[0])
	g.b = g.b[1:]
	return c % n
}

func (g *yamlGen) str(s ...string) {
	for _, x := range s {
		g.cur = append(g.cur, x...)
	}
}

func (g *yamlGen) endLine() {
	g.lines = append(g.lines, string(g.cur))
	g.cur = g.cur[:0]
	switch g.pick(12) {
	case 0:
		g.lines = append(g.lines, "")
	case 1:
		g.lines = append(g.lines, strings.Repeat(" ", g.pick(6))+"# comment")
	case 2:
		g.lines = append(g.lines, strings.Repeat(" ", g.pick(6)))
	}
}

// value writes what follows "key:" or "-" on a line at indent ind.
func (g *yamlGen) value(ind, depth int, inMap bool) {
	kind := g.pick(10)
	if depth > 3 && kind >= 6 {
		kind = 0
	}
	switch kind {
	case 0, 1, 2:
		g.str(" ", genValues[g.pick(len(genValues))])
		if g.pick(5) == 0 {
			g.str(" # c")
		}
		g.endLine()
	case 3:
		if g.pick(3) == 0 {
			g.str(" ")
		}
		g.endLine()
	case 4, 5:
		g.str(" ", genBlockHeaders[g.pick(len(genBlockHeaders))])
		g.endLine()
		in := ind + 1 + g.pick(3)
		for range g.pick(5) {
			g.str(strings.Repeat(" ", in+g.pick(4)/3*g.pick(3)), genBlockLines[g.pick(len(genBlockLines))])
			g.endLine()
		}
	case 6, 7:
		g.endLine()
		g.mapping(ind+1+g.pick(3), depth+1)
	default:
		g.endLine()
		in := ind + 1 + g.pick(3)
		if inMap && g.pick(2) == 0 {
			in = ind // a sequence at its key's indent
		}
		g.seq(in, depth+1)
	}
}

func (g *yamlGen) mapping(ind, depth int) {
	for i := range 1 + g.pick(4) {
		if i > 0 || len(g.cur) == 0 {
			g.str(strings.Repeat(" ", ind))
		}
		if g.pick(4) == 0 {
			g.str(genKeys[g.pick(len(genKeys))], ":")
		} else {
			g.str(genKeys[g.pick(8)], ":") // the usual kind
		}
		g.value(ind, depth, true)
	}
}

func (g *yamlGen) seq(ind, depth int) {
	for i := range 1 + g.pick(4) {
		if i > 0 || len(g.cur) == 0 {
			g.str(strings.Repeat(" ", ind))
		}
		g.str("-")
		switch g.pick(4) {
		case 0:
			if depth < 4 {
				sp := 1 + g.pick(3)/2*2
				g.str(strings.Repeat(" ", sp))
				g.mapping(ind+1+sp, depth+1)
				continue
			}
		case 1:
			if depth < 4 {
				g.str(" ")
				g.seq(ind+2, depth+1)
				continue
			}
		}
		g.value(ind, depth, false)
	}
}

func genYAML(b []byte) []byte {
	g := &yamlGen{b: b}
	if g.pick(8) == 0 {
		g.lines = append(g.lines, "---")
	}
	if g.pick(4) == 0 {
		g.seq(g.pick(3)/2, 0)
	} else {
		g.mapping(g.pick(3)/2, 0)
	}
	// Now and then break the document a little.
	if n := len(g.lines); n > 0 && g.pick(3) == 0 {
		i := g.pick(n)
		switch g.pick(6) {
		case 0:
			g.lines[i] = " " + g.lines[i]
		case 1:
			g.lines[i] = strings.TrimPrefix(g.lines[i], " ")
		case 2:
			g.lines[i] = "\t" + g.lines[i]
		case 3:
			g.lines = append(g.lines[:i], g.lines[i+1:]...)
		case 4:
			g.lines = slices.Insert(g.lines, i, g.lines[i])
		default:
			g.lines[i] += " "
		}
	}
	nl := "\n"
	if g.pick(8) == 0 {
		nl = "\r\n"
	}
	out := strings.Join(g.lines, nl)
	if g.pick(8) != 0 {
		out += nl
	}
	return []byte(out)
}

func TestFastYAMLToJSONGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	fastCount := 0
	buf := make([]byte, 120)
	for range n {
		for i := range buf {
			buf[i] = byte(r.Uint32())
		}
		in := genYAML(buf[:r.IntN(len(buf))])
		fuzzCompare(t, in)
		if _, ok := fastYAMLToJSON(in); ok {
			fastCount++
		}
	}
	t.Logf("%d of %d generated documents took the fast path", fastCount, n)
}

func BenchmarkYAMLToJSON(b *testing.B) {
	for _, f := range []string{"../../examples/local-path-test-vm.yaml", "testdata/fastyaml/statefulset.yaml"} {
		in, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := fastYAMLToJSON(in); !ok {
			b.Fatal("fast path not taken")
		}
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		b.Run(name+"/fast", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				fastYAMLToJSON(in)
			}
		})
		b.Run(name+"/sigs.k8s.io-yaml", func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sigsyaml.YAMLToJSON(in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
