package manifest

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/vmop/vmop/test/harness/hostile"
)

// hostileYAML are documents that must give an error or a result without
// a panic, a hang or memory growing with what they would expand to.
var hostileYAML = []struct {
	name, in string
	want     string // the JSON (if given), or part of the error when err
	err      bool
}{
	{"100k nested flow sequences", strings.Repeat("[", 100_000), "exceeded max depth of 10000", true},
	{"100k nested flow mappings", strings.Repeat("{a: ", 100_000), "exceeded max depth of 10000", true},
	{"100k nested block sequences", strings.Repeat("- ", 100_000), "exceeded max depth of 10000", true},
	{"100k nested JSON objects", strings.Repeat(`{"a":`, 100_000), "exceeded max depth of 10000", true},
	{"billion laughs", hostile.Laughs(""), "document contains excessive aliasing", true},
	{"billion laughs in a manifest", "apiVersion: v1\nkind: ConfigMap\ndata:\n" + hostile.Laughs("  "), "document contains excessive aliasing", true},
	// yaml.v2 lets aliases add 99 nodes for each node written, up to some
	// 400,000 nodes: this is just below that.
	{"aliases at yaml.v2's limit", "a0: &a0 [" + strings.Repeat("x, ", 4000) + "x]\na1: [" + strings.Repeat("*a0, ", 97) + "*a0]\n", "", false},
	{"aliases to a long string", "s: &s " + strings.Repeat("x", 64<<10) + "\nl: [" + strings.Repeat("*s, ", 3000) + strings.Repeat("1, ", 60) + "1]\n",
		"aliases make the document larger than the limit of 4 MiB", true},
	{"aliases within the limit", "s: &s " + strings.Repeat("x", 64<<10) + "\nl: [" + strings.Repeat("*s, ", 50) + "1]\n", "", false},
	{"document above the limit", strings.Repeat("#", MaxDocumentSize+1), "larger than the limit of 4 MiB", true},
	{"invalid UTF-8", "a: b\nc: d\xffe\n", "line 2: invalid UTF-8", true},
	{"invalid UTF-8 in a comment", "# \xc3\n{a: b}\n", "line 1: invalid UTF-8", true},
	{"invalid UTF-8 in JSON", "{\"a\":\n\"\xed\xa0\x80\"}", "line 2: invalid UTF-8", true}, // a surrogate
	{"UTF-8 BOM", "\ufeffa: 1\n", `{"a":1}`, false},
	{"UTF-8 BOM before JSON", "\ufeff{\"a\": [1]}", `{"a":[1]}`, false},
	{"UTF-8 BOM before full YAML", "\ufeffa: &x 1\nb: *x\n", `{"a":1,"b":1}`, false},
	{"CRLF", "a: 1\r\nb: |\r\n  x\r\n  y\r\n", `{"a":1,"b":"x\ny\n"}`, false},
	{"CRLF in full YAML", "a: &x \"p\r\n  q\"\r\nb: *x\r\nc: >\r\n  r\r\n  s\r\n", `{"a":"p q","b":"p q","c":"r s\n"}`, false},
	{"duplicate key", "a: 1\nb: 2\na: 3\n", `yaml: line 3: key "a" already set in map`, true},
	{"duplicate nested key", "a:\n  b: 1\n  b: 1\n", `yaml: line 3: key "b" already set in map`, true},
	{"duplicate keys on one line", "a: 1\na: 2\nb: 1\nb: 2\n", `yaml: line 2: key "a" already set in map; line 4: key "b" already set in map`, true},
	{"duplicate key in flow", "{a: 1, a: 2}", `key "a" already set in map`, true},
	{"duplicate key in JSON", `{"a": 1, "a": 2}`, `key "a" already set in map`, true},
	{"duplicate key, quoted", "a: 1\n'a': 2\n", `key "a" already set in map`, true},
}

func TestHostileYAMLToJSON(t *testing.T) {
	for _, c := range hostileYAML {
		t.Run(c.name, func(t *testing.T) {
			var out []byte
			var err error
			n := hostile.Allocated(func() { out, err = YAMLToJSON([]byte(c.in)) })
			t.Logf("allocated %.1f MiB", float64(n)/(1<<20))
			if n > hostile.MemoryBound {
				t.Errorf("allocated %d MiB", n>>20)
			}
			if !c.err {
				if err != nil || (c.want != "" && string(out) != c.want) {
					t.Fatalf("got %s, %v; want %s", out, err, c.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %s, %v; want an error with %q", out, err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("the error is not one line: %q", err)
			}
		})
	}
}

func TestHostileReaderHugeDocument(t *testing.T) {
	for _, c := range []struct{ name, head, line string }{
		{"long manifest", "apiVersion: v1\nkind: ConfigMap\ndata:\n", "  key: value\n"},
		{"one endless line", "apiVersion: v1\nkind: ConfigMap\ndata: ", "x"},
		{"after a good document", "apiVersion: v1\nkind: ConfigMap\n---\n", "# comment\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := hostile.NewDocument(c.head, c.line, hostile.HugeSize)
			r := NewReader(in)
			var last *Document
			var err error
			n := hostile.Allocated(func() {
				for err == nil {
					last, err = r.Next()
				}
			})
			t.Logf("allocated %.1f MiB, read %.1f MiB", float64(n)/(1<<20), float64(in.BytesRead())/(1<<20))
			if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "larger than the limit of 4 MiB") {
				t.Fatalf("got %v, want the limit", err)
			}
			if want := strings.Count(c.head, "---") + 1; last == nil || last.Index != want || !strings.HasPrefix(err.Error(), "document ") {
				t.Fatalf("got %+v, %v; want document %d named", last, err, want)
			}
			if _, err := r.Next(); !errors.Is(err, io.EOF) {
				t.Errorf("after the huge document: %v, want io.EOF", err)
			}
			if in.BytesRead() > 2*MaxDocumentSize || n > hostile.MemoryBound {
				t.Errorf("read %d MiB, allocated %d MiB", in.BytesRead()>>20, n>>20)
			}
		})
	}
}

// readAll reads every document of a stream, failing on any error.
func readAll(t *testing.T, in string) []*Document {
	t.Helper()
	r := NewReader(strings.NewReader(in))
	var docs []*Document
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%v", err)
		}
		docs = append(docs, d)
	}
}

func TestHostileReaderEncoding(t *testing.T) {
	const lf = "# a comment\n---\napiVersion: v1\nkind: ConfigMap\ndata:\n  script: |\n    a\n    b\n---\n{\"apiVersion\": \"v1\",\n \"kind\": \"Secret\"}\n"
	// With CRLF, the line of k fills the reader's 64 KiB buffer up to its
	// CR; its LF comes in the next read.
	long := "apiVersion: v1\nkind: ConfigMap\ndata:\n  k: " + strings.Repeat("x", 64<<10-len("  k: \r")) + "\n"
	for _, c := range []struct{ name, in, same string }{
		{"BOM", "\ufeff" + lf, lf},
		{"BOM before a separator", "\ufeff---\n" + lf, "---\n" + lf},
		{"CRLF", strings.ReplaceAll(lf, "\n", "\r\n"), lf},
		{"BOM and CRLF", "\ufeff" + strings.ReplaceAll(lf, "\n", "\r\n"), lf},
		{"CRLF across the buffer", strings.ReplaceAll(long, "\n", "\r\n"), long},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, want := readAll(t, c.in), readAll(t, c.same)
			if len(got) != len(want) {
				t.Fatalf("%d documents, want %d", len(got), len(want))
			}
			for i := range got {
				if !bytes.Equal(got[i].Raw, want[i].Raw) || !bytes.Equal(got[i].JSON, want[i].JSON) || got[i].Index != want[i].Index {
					t.Errorf("document %d differs from %q's (a CR in it: %v)", i+1, c.same[:20], bytes.IndexByte(got[i].Raw, '\r') >= 0)
				}
			}
		})
	}
}

func TestHostileReaderUTF16(t *testing.T) {
	for _, bom := range []string{"\xff\xfe", "\xfe\xff"} {
		_, err := NewReader(strings.NewReader(bom + "a\x00:\x00")).Next()
		if err == nil || !strings.Contains(err.Error(), "UTF-16 is not supported") {
			t.Errorf("%q: got %v, want UTF-16 refused", bom, err)
		}
	}
}

func TestHostileReaderBadDocuments(t *testing.T) {
	in := "apiVersion: v1\nkind: A\n---\napiVersion: v1\nkind: B\nkind: C\n---\nx: \xff\n---\n" + strings.Repeat("[", 100_000) + "\n---\napiVersion: v1\nkind: D\n"
	r := NewReader(strings.NewReader(in))
	var got []string
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			got = append(got, err.Error())
			continue
		}
		got = append(got, d.Kind)
	}
	want := []string{"A", `document 2: yaml: line 3: key "kind" already set in map`, "document 3: line 1: invalid UTF-8",
		"document 4: yaml: exceeded max depth of 10000", "D"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
}

func TestReadAllLimit(t *testing.T) {
	in := hostile.NewDocument("", "x", hostile.HugeSize)
	var err error
	n := hostile.Allocated(func() { _, err = ReadAll(in, MaxDocumentSize) })
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "4 MiB") {
		t.Fatalf("got %v, want the limit", err)
	}
	if in.BytesRead() != MaxDocumentSize+1 || n > hostile.MemoryBound {
		t.Errorf("read %d bytes, allocated %d MiB", in.BytesRead(), n>>20)
	}
	data, err := ReadAll(strings.NewReader("abc"), 3)
	if string(data) != "abc" || err != nil {
		t.Errorf("at the limit: %q, %v", data, err)
	}
}
