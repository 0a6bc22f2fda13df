package render

import (
	"bytes"
	"fmt"
	"io"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
)

// maxResourceList bounds the ResourceList read. It holds every resource
// of a kustomization in one document, so it gets more room than one
// manifest (manifest.MaxDocumentSize); kustomize itself holds and writes
// as much before it calls the function.
const maxResourceList = 16 << 20

// maxResourceListNodes bounds the YAML nodes of a ResourceList: kyaml
// spends some 1.5 KiB of memory on each to read and write the list, 1.5
// GiB for this many, which manifests have in about 11 MiB. A flow list
// ("[a,a,...") has one every two bytes, eight million in 16 MiB.
const maxResourceListNodes = 1 << 20

// RunFunction runs render as a KRM function (kustomize, kpt): it reads a
// ResourceList from in and writes it to out with every VirtualMachine
// replaced by its rendered objects. Problems become error results, and the
// error it returns makes the function exit non-zero. Input above 16 MiB is
// refused after reading that much.
func RunFunction(in io.Reader, out io.Writer) error {
	data, err := manifest.ReadAll(in, maxResourceList)
	if err == nil {
		err = manifest.CheckUTF8(data) // yaml.v3 would not name the line
	}
	if err != nil {
		return fmt.Errorf("ResourceList: %w", err)
	}
	return framework.Execute(framework.ResourceListProcessorFunc(renderResourceList),
		&kio.ByteReadWriter{Reader: bytes.NewReader(data), Writer: out, KeepReaderAnnotations: true})
}

func renderResourceList(rl *framework.ResourceList) error {
	if n := countNodes(rl.Items, maxResourceListNodes); n > maxResourceListNodes {
		rl.Items = nil // writing them back is what costs most
		return fmt.Errorf("ResourceList: more than %d YAML nodes", maxResourceListNodes)
	}
	var items []*yaml.RNode
	var results framework.Results
	seen := map[string]int{}
	for _, item := range rl.Items {
		ref := &yaml.ResourceIdentifier{
			TypeMeta: yaml.TypeMeta{APIVersion: item.GetApiVersion(), Kind: item.GetKind()},
			NameMeta: yaml.NameMeta{Name: item.GetName(), Namespace: item.GetNamespace()},
		}
		if err := duplicateKey(item.YNode(), seen); err != nil {
			results = append(results, errorResult(err, ref))
			continue
		}
		if !v1.IsVirtualMachine(item.GetApiVersion(), item.GetKind()) {
			items = append(items, item)
			continue
		}
		data, err := toJSON(item)
		if err != nil { // aliases that expand too far, say
			results = append(results, errorResult(err, ref))
			continue
		}
		objs, problems, warnings := render.FromJSON(data, render.StreamOptions{Options: render.Options{ConfigAccess: true}})
		results = append(results, toResults(problems, framework.Error, ref)...)
		results = append(results, toResults(warnings, framework.Warning, ref)...)
		if objs == nil {
			continue
		}
		for _, o := range objs.List() {
			n, err := toRNode(o)
			if err != nil {
				return fmt.Errorf("%s: %w", item.GetName(), err)
			}
			items = append(items, n)
		}
	}
	rl.Results = append(rl.Results, results...)
	if results.ExitCode() != 0 {
		return results
	}
	rl.Items = items
	return nil
}

// toJSON converts an item as the render command converts a document, so
// that a VM means the same in both (YAML 1.1 booleans, say), and its
// aliases are bounded alike.
func toJSON(item *yaml.RNode) ([]byte, error) {
	y, err := item.String() // aliases stay aliases
	if err != nil {
		return nil, err
	}
	return manifest.YAMLToJSON([]byte(y))
}

// countNodes counts the nodes of items, stopping once past limit.
func countNodes(items []*yaml.RNode, limit int) int {
	n := 0
	for _, it := range items {
		if n += nodes(it.YNode(), limit-n); n > limit {
			break
		}
	}
	return n
}

func nodes(n *yaml.Node, limit int) int {
	c := 1
	for _, k := range n.Content {
		if c += nodes(k, limit-c); c > limit {
			break
		}
	}
	return c
}

// duplicateKey finds the first key that a mapping under n repeats, with
// its lines in the input: the render command refuses those too. seen is
// scratch space. Aliases are not followed (their targets are walked where
// they are defined), so no alias is expanded.
func duplicateKey(n *yaml.Node, seen map[string]int) error {
	if n.Kind == yaml.MappingNode {
		clear(seen)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				continue
			}
			if line, ok := seen[k.Value]; ok {
				return fmt.Errorf("line %d: key %q already set at line %d", k.Line, k.Value, line)
			}
			seen[k.Value] = k.Line
		}
	}
	for _, c := range n.Content {
		if err := duplicateKey(c, seen); err != nil {
			return err
		}
	}
	return nil
}

func errorResult(err error, ref *yaml.ResourceIdentifier) *framework.Result {
	return &framework.Result{Message: err.Error(), Severity: framework.Error, ResourceRef: ref}
}

func toResults(ps []render.Problem, sev framework.Severity, ref *yaml.ResourceIdentifier) framework.Results {
	var out framework.Results
	for _, p := range ps {
		r := &framework.Result{Message: p.Message, Severity: sev, ResourceRef: ref}
		if p.Field != "" {
			r.Field = &framework.Field{Path: p.Field}
		}
		out = append(out, r)
	}
	return out
}

func toRNode(obj any) (*yaml.RNode, error) {
	y, err := manifest.YAML(obj)
	if err != nil {
		return nil, err
	}
	return yaml.Parse(string(y))
}
