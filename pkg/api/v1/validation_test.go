package v1

import (
	"testing"

	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FuzzLabelsOK: the quick label check never accepts what apimachinery
// rejects, and accepts the common forms.
func FuzzLabelsOK(f *testing.F) {
	for _, kv := range [][2]string{
		{"app.kubernetes.io/name", "vm-runner"}, {"a-.b/x", "y"}, {"A.b/x", ""}, {"x", "-y"},
		{"vmrunner.jdrupes.org/disk", "system"}, {"a..b/c", "d"}, {"_x", "y_"}, {"k", "Valid_Value.1"},
	} {
		f.Add(kv[0], kv[1])
	}
	f.Fuzz(func(t *testing.T, k, v string) {
		m := map[string]string{k: v}
		errs := metav1validation.ValidateLabels(m, field.NewPath("labels"))
		if labelsOK(m) && len(errs) > 0 {
			t.Fatalf("labelsOK accepts %q: %q, apimachinery says %v", k, v, errs)
		}
	})
}

func TestLabelsOKAcceptsCommonLabels(t *testing.T) {
	if !labelsOK(map[string]string{"app.kubernetes.io/name": "vm-runner", "vmrunner.jdrupes.org/disk": "system", "tier": ""}) {
		t.Fatal("common labels take the slow path")
	}
}

func FuzzDNSLabelErrors(f *testing.F) {
	for _, s := range []string{"test-vm", "-a", "a-", "A", "a.b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if (len(dnsLabelErrors(s)) == 0) != (len(validation.IsDNS1123Label(s)) == 0) {
			t.Fatalf("dnsLabelErrors and apimachinery disagree on %q", s)
		}
	})
}
