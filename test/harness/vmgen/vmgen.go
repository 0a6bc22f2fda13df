// Package vmgen makes random VirtualMachines from the CRD's schema, for the
// contract test: every property the schema has is set now and then, with
// values drawn from what users write and, less often, from the edges where
// the API server, validation or qemu may disagree. A new property in the
// schema is generated without a change here; a value pool for it makes
// its values meaningful.
package vmgen

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
)

// Generator draws VirtualMachines. It is not safe for concurrent use.
type Generator struct {
	rnd  *rand.Rand
	spec *apiextensionsv1.JSONSchemaProps
	// Odd is the chance that a value with a pool comes from its edge
	// cases rather than its usual values.
	Odd float64
}

// New returns a Generator whose draws depend only on seed.
func New(seed uint64) (*Generator, error) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(v1.CRDManifest, crd); err != nil {
		return nil, fmt.Errorf("the CRD: %w", err)
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	spec := root.Properties["spec"]
	return &Generator{rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), spec: &spec, Odd: 0.04}, nil
}

// VM returns a VirtualMachine named name in namespace as an unstructured
// object.
func (g *Generator) VM(namespace, name string) map[string]any {
	return map[string]any{
		"apiVersion": v1.APIVersion,
		"kind":       v1.Kind,
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"spec":       g.value("spec", g.spec),
	}
}

// Name returns a VM name: usually a valid one, now and then one the API
// server takes but a VM cannot have.
func (g *Generator) Name(i int) string {
	if g.odd() {
		return pick(g, []string{fmt.Sprintf("c.%d", i), fmt.Sprintf("c%d-%s", i, strings.Repeat("x", 50))})
	}
	return fmt.Sprintf("c%d", i)
}

func (g *Generator) odd() bool { return g.rnd.Float64() < g.Odd }

func pick[T any](g *Generator, from []T) T { return from[g.rnd.IntN(len(from))] }

// value draws a value for the schema s found at path ("spec.vm.disks[]").
func (g *Generator) value(path string, s *apiextensionsv1.JSONSchemaProps) any {
	if p, ok := pools[path]; ok {
		vs := p.usual
		if len(p.odd) > 0 && (len(vs) == 0 || g.odd()) {
			vs = p.odd
		}
		return clone(pick(g, vs))
	}
	switch {
	case len(s.Enum) > 0:
		if g.odd() {
			return pick(g, []any{"", "Bogus"})
		}
		var v any
		_ = yaml.Unmarshal(pick(g, s.Enum).Raw, &v)
		return v
	case len(s.Properties) > 0:
		return g.object(path, s)
	case s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil:
		m := map[string]any{}
		for range g.rnd.IntN(3) {
			m[pick(g, mapKeys)] = g.value(path+"{}", s.AdditionalProperties.Schema)
		}
		return m
	case s.Type == "array":
		n := g.rnd.IntN(4)
		if s.MaxItems != nil && g.odd() {
			n = int(*s.MaxItems) + g.rnd.IntN(2) // at the limit, or one over
		}
		var items []any
		for range n {
			items = append(items, g.value(path+"[]", s.Items.Schema))
		}
		return items
	case s.XIntOrString:
		return pick(g, []any{1, "1", "100m", "1Gi"})
	case s.Type == "integer":
		return g.integer(s)
	case s.Type == "boolean":
		return g.rnd.IntN(2) == 0
	case s.Type == "string":
		return g.str()
	default: // free-form
		return pick(g, []any{map[string]any{"a": "b"}, map[string]any{}})
	}
}

// object sets each property with even chance (required ones always). Of
// a oneOf whose branches each require one property, it usually sets one.
func (g *Generator) object(path string, s *apiextensionsv1.JSONSchemaProps) map[string]any {
	m := map[string]any{}
	exclusive := oneOfKeys(s)
	if len(exclusive) > 0 {
		n := 1
		if g.odd() {
			n = pick(g, []int{0, 2})
		}
		keys := slices.Sorted(maps.Keys(exclusive))
		g.rnd.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
		for _, k := range keys[:min(n, len(keys))] {
			p := s.Properties[k]
			m[k] = g.value(path+"."+k, &p)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(s.Properties)) {
		if exclusive[k] || (!slices.Contains(s.Required, k) && g.rnd.IntN(2) == 0) {
			continue
		}
		p := s.Properties[k]
		m[k] = g.value(path+"."+k, &p)
	}
	return m
}

// oneOfKeys are the properties of a oneOf of "required: [x]" branches.
func oneOfKeys(s *apiextensionsv1.JSONSchemaProps) map[string]bool {
	keys := map[string]bool{}
	for _, b := range s.OneOf {
		if len(b.Required) != 1 {
			return nil
		}
		keys[b.Required[0]] = true
	}
	return keys
}

func (g *Generator) integer(s *apiextensionsv1.JSONSchemaProps) any {
	lo := int64(0)
	if s.Minimum != nil {
		lo = int64(*s.Minimum)
	}
	if g.odd() {
		edges := []int64{lo - 1, 1<<31 - 1}
		if s.Maximum != nil {
			edges = append(edges, int64(*s.Maximum)+1)
		}
		return pick(g, edges)
	}
	hi := lo + 3
	if s.Maximum != nil {
		hi = min(hi, int64(*s.Maximum))
	}
	return lo + g.rnd.Int64N(hi-lo+1)
}

func (g *Generator) str() string {
	if g.odd() {
		return pick(g, []string{"a,b", "x y", "ünï", "two\nlines", strings.Repeat("l", 300)})
	}
	return pick(g, []string{"", "a", "admin", "vm.example.com", "x-1"})
}

// mapKeys are the keys of maps (labels, annotations, node selectors).
var mapKeys = []string{"app", "example.com/tier", "team", "kubernetes.io/arch"}

func clone(v any) any {
	switch v := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[k] = clone(e)
		}
		return m
	case []any:
		s := make([]any, len(v))
		for i, e := range v {
			s[i] = clone(e)
		}
		return s
	default:
		return v
	}
}
