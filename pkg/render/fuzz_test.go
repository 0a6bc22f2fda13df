package render

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/test/harness/hostile"
)

// FuzzRender feeds arbitrary documents to the reader, decoder, validator
// and renderer: none may panic, a bad input is reported as problems, and a
// good one renders to YAML that parses again.
func FuzzRender(f *testing.F) {
	files, _ := filepath.Glob("../../examples/*.yaml")
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {vm: {maximumRam: 4Gx, currentCpus: 9, maximumCpus: 2}}\n",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {vm: {cpuTopology: {sockets: 2147483647, coresPerDie: 2147483647}}}\n",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {vm: {disks: [{}, {cdrom: {image: x}, volumeClaimTemplate: {}}]}}\n",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {cloudInit: {userData: 5, metaData: [], networkConfig: null}, vm: {}}\n",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nspec: null\n---\n- a\n---\n: :\n",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a, annotations: {vmoperator.jdrupes.org/drain: wait}}\nspec: {vm: {}}\n",
		// Hostile input: a BOM and CRLF, a duplicate key, invalid UTF-8,
		// UTF-16, a billion laughs and nesting beyond yaml.v2's limit.
		"\ufeffapiVersion: vmoperator.jdrupes.org/v1\r\nkind: VirtualMachine\r\nmetadata: {name: a}\r\nspec:\r\n  vm: {}\r\n",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec:\n  vm: {}\n  vm: {}\n",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: \"a\xff\"}\nspec: {vm: {}}\n",
		"\xff\xfea\x00:\x00",
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec:\n  vm: {}\n  cloudInit:\n    userData:\n" + hostile.Laughs("      "),
		"apiVersion: vmoperator.jdrupes.org/v1\nkind: VirtualMachine\nmetadata: {name: a}\nspec: {vm: {}, cloudInit: {userData: {a: " + strings.Repeat("[", 10_001) + "}}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, problems, err := fuzzStream(t, in)
		if err != nil {
			return // a reader error ends the stream; it is reported, not a panic
		}
		// A manifest edited on Windows renders the same.
		if !bytes.Contains(in, []byte("\r")) {
			crlfOut, crlfProblems, err := fuzzStream(t, bytes.ReplaceAll(in, []byte("\n"), []byte("\r\n")))
			if err != nil || !bytes.Equal(out, crlfOut) || !slices.Equal(problems, crlfProblems) {
				t.Fatalf("CRLF line breaks change the result: %v\n%q\n%q", err, problems, crlfProblems)
			}
		}
		for _, p := range problems {
			if p.Message == "" {
				t.Fatalf("a problem without a message: %+v", p)
			}
		}
		if len(problems) > 0 {
			return
		}
		r := manifest.NewReader(bytes.NewReader(out))
		for {
			d, err := r.Next()
			if d == nil {
				break
			}
			if err != nil {
				t.Fatalf("the output does not parse: %v\n%s", err, d.Raw)
			}
			if _, err := yaml.YAMLToJSON(d.Raw); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// fuzzStream renders in to YAML.
func fuzzStream(t *testing.T, in []byte) ([]byte, []Problem, error) {
	var out bytes.Buffer
	w, err := manifest.NewWriter(&out, manifest.FormatYAML)
	if err != nil {
		t.Fatal(err)
	}
	problems, err := Stream(bytes.NewReader(in), "fuzz", w, StreamOptions{})
	if err != nil {
		return nil, nil, err
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), problems, nil
}
