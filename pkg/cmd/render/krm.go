package render

import (
	"fmt"
	"io"

	"sigs.k8s.io/kustomize/kyaml/fn/framework"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
)

// RunFunction runs render as a KRM function (kustomize, kpt): it reads a
// ResourceList from in and writes it to out with every VirtualMachine
// replaced by its rendered objects. Problems become error results, and the
// error it returns makes the function exit non-zero.
func RunFunction(in io.Reader, out io.Writer) error {
	return framework.Execute(framework.ResourceListProcessorFunc(renderResourceList),
		&kio.ByteReadWriter{Reader: in, Writer: out, KeepReaderAnnotations: true})
}

func renderResourceList(rl *framework.ResourceList) error {
	var items []*yaml.RNode
	var results framework.Results
	for _, item := range rl.Items {
		if !v1.IsVirtualMachine(item.GetApiVersion(), item.GetKind()) {
			items = append(items, item)
			continue
		}
		data, err := item.MarshalJSON()
		if err != nil {
			return err
		}
		objs, problems, warnings := render.FromJSON(data, render.StreamOptions{})
		ref := &yaml.ResourceIdentifier{
			TypeMeta: yaml.TypeMeta{APIVersion: item.GetApiVersion(), Kind: item.GetKind()},
			NameMeta: yaml.NameMeta{Name: item.GetName(), Namespace: item.GetNamespace()},
		}
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
	y, err := manifest.ManifestYAML(nil, obj)
	if err != nil {
		return nil, err
	}
	return yaml.Parse(string(y))
}
