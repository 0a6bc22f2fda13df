package v1_test

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsvalidation "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/validation"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	apiservervalidation "k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	vmv1 "github.com/vmop/vmop/pkg/api/v1"
)

func loadCRD(t testing.TB) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{}
	// Strict, so that a misspelt schema keyword fails here, not silently.
	require.NoError(t, yaml.UnmarshalStrict(vmv1.CRDManifest, crd))
	return crd
}

func rootSchema(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.JSONSchemaProps {
	t.Helper()
	require.Len(t, crd.Spec.Versions, 1)
	v := crd.Spec.Versions[0]
	require.NotNil(t, v.Schema)
	require.NotNil(t, v.Schema.OpenAPIV3Schema)
	return v.Schema.OpenAPIV3Schema
}

func TestCRDNamesAndColumns(t *testing.T) {
	crd := loadCRD(t)
	require.Equal(t, "apiextensions.k8s.io/v1", crd.APIVersion)
	require.Equal(t, "CustomResourceDefinition", crd.Kind)
	require.Equal(t, vmv1.Resource+"."+vmv1.Group, crd.Name)
	require.Equal(t, vmv1.Group, crd.Spec.Group)
	require.Equal(t, apiextensionsv1.NamespaceScoped, crd.Spec.Scope)
	require.Equal(t, apiextensionsv1.CustomResourceDefinitionNames{
		Plural:     vmv1.Resource,
		Singular:   "vm",
		ShortNames: []string{"vm"},
		Kind:       vmv1.Kind,
		ListKind:   vmv1.Kind + "List",
	}, crd.Spec.Names)

	require.Len(t, crd.Spec.Versions, 1)
	v := crd.Spec.Versions[0]
	require.Equal(t, vmv1.SchemeGroupVersion.Version, v.Name)
	require.True(t, v.Served)
	require.True(t, v.Storage)
	require.NotNil(t, v.Subresources)
	require.NotNil(t, v.Subresources.Status)
	require.Nil(t, v.Subresources.Scale)
	require.Equal(t, []apiextensionsv1.CustomResourceColumnDefinition{
		{Name: "State", Type: "string", Description: "The desired state.", JSONPath: ".spec.vm.state"},
		{Name: "Status", Type: "string", Description: "What the VM does (a failure's reason, Paused, or the Running condition's reason), written by vm-operator.",
			JSONPath: ".status.printableStatus"},
		{Name: "CPUs", Type: "integer", JSONPath: ".status.cpus"},
		{Name: "RAM", Type: "string", JSONPath: ".status.ram"},
		{Name: "Node", Type: "string", JSONPath: ".status.node"},
		{Name: "IP", Type: "string", Description: "The guest's first address, from its agent.", Priority: 1,
			JSONPath: ".status.interfaces[0].ipAddresses[0]"},
		{Name: "Console", Type: "string", Description: "The address of the connected SPICE client.", Priority: 1,
			JSONPath: ".status.consoleClient"},
		{Name: "Target CPUs", Type: "integer", Description: "The vCPUs the spec asks for (currentCpus, with its default).", Priority: 1,
			JSONPath: ".status.targetCpus"},
		{Name: "Target RAM", Type: "string", Description: "The memory the spec asks for (currentRam, with its default).", Priority: 1,
			JSONPath: ".status.targetRam"},
		{Name: "Age", Type: "date", JSONPath: ".metadata.creationTimestamp"},
	}, v.AdditionalPrinterColumns)

	root := rootSchema(t, crd)
	require.Equal(t, []string{"vm"}, root.Properties["spec"].Required)
}

// internalCRD converts the CRD to the API server's internal form, with the
// defaults the server would set.
func internalCRD(t testing.TB) *apiextensions.CustomResourceDefinition {
	t.Helper()
	crd := loadCRD(t)
	scheme := runtime.NewScheme()
	require.NoError(t, apiextensions.AddToScheme(scheme))
	require.NoError(t, apiextensionsv1.AddToScheme(scheme))
	scheme.Default(crd)
	internal := &apiextensions.CustomResourceDefinition{}
	require.NoError(t, scheme.Convert(crd, internal, nil))
	return internal
}

func internalSchema(t testing.TB) *apiextensions.JSONSchemaProps {
	t.Helper()
	crd := internalCRD(t)
	// With one version, the internal form keeps the schema at the top.
	validation := crd.Spec.Validation
	if validation == nil {
		validation = crd.Spec.Versions[0].Schema
	}
	require.NotNil(t, validation)
	return validation.OpenAPIV3Schema
}

// TestCRDValidates runs the API server's own CRD validation, which includes
// the structural schema rules, so a bad schema fails without a server.
func TestCRDValidates(t *testing.T) {
	errs := apiextensionsvalidation.ValidateCustomResourceDefinition(t.Context(), internalCRD(t))
	require.Empty(t, errs.ToAggregate(), "CRD validation")

	s, err := structuralschema.NewStructural(internalSchema(t))
	require.NoError(t, err)
	require.Empty(t, structuralschema.ValidateStructural(field.NewPath("openAPIV3Schema"), s).ToAggregate())
}

// TestCRDSchemaOffline runs the examples of the API server test through
// the server's schema validator, for quick feedback without a server.
func TestCRDSchemaOffline(t *testing.T) {
	validator, _, err := apiservervalidation.NewSchemaValidator(internalSchema(t))
	require.NoError(t, err)
	for _, doc := range []string{fullVM, sourceImageVM, minimalVM} {
		vm := decodeYAML(t, doc)
		require.Empty(t, apiservervalidation.ValidateCustomResource(nil, vm.Object, validator), vm.GetName())
	}
	for _, tc := range invalidVMs {
		errs := apiservervalidation.ValidateCustomResource(nil, badVM(t, tc.patch).Object, validator)
		require.ErrorContains(t, errs.ToAggregate(), tc.want, tc.name)
	}
}

// TestCRDHasNoDefaults: defaults are set in Go; schema defaults would make
// the stored object differ from the applied manifest (GitOps drift). The
// one default is the status's observedGeneration (0, not yet observed),
// which no manifest holds and no GitOps tool compares: it keeps kstatus
// from taking a VM the operator has not seen for done.
func TestCRDHasNoDefaults(t *testing.T) {
	var found []string
	visitSchemas("", rootSchema(t, loadCRD(t)), func(path string, s *apiextensionsv1.JSONSchemaProps) {
		if s.Default != nil {
			found = append(found, path+"="+string(s.Default.Raw))
		}
	})
	require.Equal(t, []string{`.status={"observedGeneration":0}`}, found, "schema defaults")
}

// TestCRDSchemaMatchesGoTypes walks the Go types and the schema together:
// every JSON field needs a property of the matching type, and every
// property a field.
func TestCRDSchemaMatchesGoTypes(t *testing.T) {
	root := rootSchema(t, loadCRD(t))
	require.Empty(t, compareSchema(reflect.TypeFor[vmv1.VirtualMachine](), root))
}

// TestCRDSchemaComparisonCatchesDrift makes sure the comparison above
// notices a field without a property and a property without a field.
func TestCRDSchemaComparisonCatchesDrift(t *testing.T) {
	type withExtraField struct {
		vmv1.VirtualMachine `json:",inline"`
		Extra               string `json:"extra,omitempty"`
	}
	root := rootSchema(t, loadCRD(t))
	errs := compareSchema(reflect.TypeFor[withExtraField](), root)
	require.Contains(t, strings.Join(errs, "\n"), ".extra: Go field has no schema property")

	// Properties maps are shared by the copies that indexing returns.
	spice := root.Properties["spec"].Properties["vm"].Properties["display"].Properties["spice"]
	spice.Properties["bogus"] = apiextensionsv1.JSONSchemaProps{Type: "string"}
	errs = compareSchema(reflect.TypeFor[vmv1.VirtualMachine](), root)
	require.Contains(t, strings.Join(errs, "\n"), ".spec.vm.display.spice.bogus: schema property has no Go field")
}

// TestCRDQuantityPatterns checks the quantity patterns. Whatever they
// accept must parse as a quantity; they reject some odd strings that the
// parser reads as 0 ("Gi", "e3").
func TestCRDQuantityPatterns(t *testing.T) {
	root := rootSchema(t, loadCRD(t))
	vm := root.Properties["spec"].Properties["vm"]
	ram := regexp.MustCompile(vm.Properties["maximumRam"].Pattern)
	require.Equal(t, ram.String(), vm.Properties["currentRam"].Pattern)
	limits := root.Properties["spec"].Properties["resources"].Properties["limits"]
	kube := regexp.MustCompile(limits.AdditionalProperties.Schema.Pattern)

	for _, tc := range []struct {
		q         string
		kube, ram bool
	}{
		{"8Gi", true, true}, {"1G", true, true}, {"4294967296", true, true}, {"0.5Gi", true, true},
		{"1.5", true, true}, {".5", true, true}, {"1.", true, true}, {"500m", true, true},
		{"100n", true, true}, {"3u", true, true}, {"2k", true, true}, {"1Ki", true, true},
		{"1Ei", true, true}, {"1E", true, true}, {"1e3", true, true}, {"1E9", true, true},
		{"1e-3", true, true}, {"1e+3", true, true}, {"+1", true, true}, {"+.5Gi", true, true},
		{"00012", true, true},
		// Negative sizes are quantities, but neither RAM nor resources.
		{"-1", false, false}, {"-1Gi", false, false}, {"-.5", false, false},
		{"4Gx", false, false}, {"", false, false}, {"Gi", false, false}, {"e3", false, false},
		{"+", false, false}, {".", false, false}, {"1.2.3", false, false}, {"1Ki1", false, false},
		{"1e", false, false}, {"1 Gi", false, false}, {" 1", false, false}, {"1gi", false, false},
		{"1K", false, false}, {"1e1.5", false, false}, {"0x10", false, false}, {"1_000", false, false},
	} {
		require.Equal(t, tc.kube, kube.MatchString(tc.q), "resources pattern on %q", tc.q)
		require.Equal(t, tc.ram, ram.MatchString(tc.q), "RAM pattern on %q", tc.q)
		if tc.kube || strings.HasPrefix(tc.q, "-") {
			_, err := resource.ParseQuantity(tc.q)
			require.NoError(t, err, "pattern accepts %q", tc.q)
		}
	}
}

// compareSchema returns the differences between Go type t and schema s.
func compareSchema(t reflect.Type, s *apiextensionsv1.JSONSchemaProps) []string {
	c := &comparer{}
	c.compare("", t, s)
	return c.errs
}

type comparer struct{ errs []string }

func (c *comparer) errorf(path, format string, args ...any) {
	if path == "" {
		path = "."
	}
	c.errs = append(c.errs, path+": "+fmt.Sprintf(format, args...))
}

var (
	freeFormType     = reflect.TypeFor[vmv1.FreeForm]()
	quantityType     = reflect.TypeFor[vmv1.Quantity]()
	kubeQuantityType = reflect.TypeFor[resource.Quantity]()
	timeType         = reflect.TypeFor[metav1.Time]()
	objectMetaType   = reflect.TypeFor[metav1.ObjectMeta]()
)

func (c *comparer) compare(path string, t reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	wantType := func(typ string) bool {
		if s.Type != typ {
			c.errorf(path, "schema type %q, Go %s wants %q", s.Type, t, typ)
			return false
		}
		return true
	}
	// Types with their own JSON form come first.
	switch t {
	case freeFormType:
		if s.XPreserveUnknownFields == nil || !*s.XPreserveUnknownFields || len(s.Properties) > 0 {
			c.errorf(path, "free-form value needs x-kubernetes-preserve-unknown-fields and no properties")
		}
		return
	case quantityType, kubeQuantityType:
		if !s.XIntOrString || s.Pattern == "" {
			c.errorf(path, "quantity needs x-kubernetes-int-or-string and a pattern")
		}
		return
	case timeType:
		if wantType("string") && s.Format != "date-time" {
			c.errorf(path, "time needs format date-time")
		}
		return
	case objectMetaType:
		// The API server owns metadata's schema.
		if wantType("object") && len(s.Properties) > 0 {
			c.errorf(path, "metadata must not be restricted")
		}
		return
	}
	switch t.Kind() {
	case reflect.String:
		wantType("string")
	case reflect.Bool:
		wantType("boolean")
	case reflect.Int, reflect.Int32, reflect.Int64, reflect.Uint32:
		wantType("integer")
	case reflect.Slice:
		if !wantType("array") {
			return
		}
		if s.Items == nil || s.Items.Schema == nil {
			c.errorf(path, "array without items schema")
			return
		}
		c.compare(path+"[]", t.Elem(), s.Items.Schema)
	case reflect.Map:
		if !wantType("object") {
			return
		}
		if t.Key().Kind() != reflect.String {
			c.errorf(path, "map key %s is not a string", t.Key())
		}
		if s.AdditionalProperties == nil || s.AdditionalProperties.Schema == nil {
			c.errorf(path, "map without additionalProperties schema")
			return
		}
		vs := s.AdditionalProperties.Schema
		if nullable := t.Elem().Kind() == reflect.Pointer; nullable != vs.Nullable {
			c.errorf(path, "map values: nullable %v, Go %s wants %v", vs.Nullable, t.Elem(), nullable)
		}
		c.compare(path+"{}", t.Elem(), vs)
	case reflect.Struct:
		if !wantType("object") {
			return
		}
		c.compareStruct(path, t, s)
	default:
		c.errorf(path, "Go type %s has no rule here", t)
	}
}

func (c *comparer) compareStruct(path string, t reflect.Type, s *apiextensionsv1.JSONSchemaProps) {
	fields := jsonFields(t)
	for _, f := range fields {
		p, ok := s.Properties[f.name]
		if !ok {
			c.errorf(path+"."+f.name, "Go field has no schema property")
			continue
		}
		c.compare(path+"."+f.name, f.typ, &p)
	}
	for name := range s.Properties {
		if !slices.ContainsFunc(fields, func(f jsonField) bool { return f.name == name }) {
			c.errorf(path+"."+name, "schema property has no Go field")
		}
	}
	// A required field must be one that encoding/json always writes, or Go
	// could produce objects that the API server rejects.
	for _, name := range s.Required {
		i := slices.IndexFunc(fields, func(f jsonField) bool { return f.name == name })
		if i < 0 {
			c.errorf(path+"."+name, "required, but no Go field")
			continue
		}
		f := fields[i]
		if f.omitempty && f.typ.Kind() != reflect.Struct {
			c.errorf(path+"."+name, "required, but the Go field is omitempty")
		}
	}
	// oneOf and friends may only name properties that exist.
	visitJunctors(s, func(j *apiextensionsv1.JSONSchemaProps) {
		for _, name := range j.Required {
			if _, ok := s.Properties[name]; !ok {
				c.errorf(path+"."+name, "named by oneOf/anyOf/not, but no property")
			}
		}
	})
}

type jsonField struct {
	name      string
	typ       reflect.Type
	omitempty bool
}

// jsonFields lists the JSON fields of a struct as encoding/json sees them,
// with inlined embedded structs flattened.
func jsonFields(t reflect.Type) []jsonField {
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			out = append(out, jsonFields(f.Type)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, jsonField{name: name, typ: f.Type, omitempty: slices.Contains(strings.Split(opts, ","), "omitempty")})
	}
	return out
}

// visitJunctors calls fn for every schema below s's oneOf, anyOf, allOf
// and not, however deeply nested.
func visitJunctors(s *apiextensionsv1.JSONSchemaProps, fn func(*apiextensionsv1.JSONSchemaProps)) {
	var visit func(j *apiextensionsv1.JSONSchemaProps)
	visit = func(j *apiextensionsv1.JSONSchemaProps) {
		fn(j)
		for _, list := range [][]apiextensionsv1.JSONSchemaProps{j.OneOf, j.AnyOf, j.AllOf} {
			for i := range list {
				visit(&list[i])
			}
		}
		if j.Not != nil {
			visit(j.Not)
		}
	}
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{s.OneOf, s.AnyOf, s.AllOf} {
		for i := range list {
			visit(&list[i])
		}
	}
	if s.Not != nil {
		visit(s.Not)
	}
}

// visitSchemas calls fn for s and every schema below it.
func visitSchemas(path string, s *apiextensionsv1.JSONSchemaProps, fn func(string, *apiextensionsv1.JSONSchemaProps)) {
	fn(path, s)
	for name, p := range s.Properties {
		visitSchemas(path+"."+name, &p, fn)
	}
	if s.Items != nil && s.Items.Schema != nil {
		visitSchemas(path+"[]", s.Items.Schema, fn)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		visitSchemas(path+"{}", s.AdditionalProperties.Schema, fn)
	}
	for _, list := range [][]apiextensionsv1.JSONSchemaProps{s.OneOf, s.AnyOf, s.AllOf} {
		for i := range list {
			visitSchemas(path, &list[i], fn)
		}
	}
	if s.Not != nil {
		visitSchemas(path, s.Not, fn)
	}
}
