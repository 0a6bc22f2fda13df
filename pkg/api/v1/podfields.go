package v1

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The fields copied to the pod are checked here as far as users get them
// wrong (names, labels, quantities, selector operators), so that such a VM
// is refused up front rather than by the API server when the operator
// applies its StatefulSet. The CRD's schema has the same rules.

var (
	nodeSelectorOperators  = []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt}
	labelSelectorOperators = []metav1.LabelSelectorOperator{metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist}
)

func (s *VirtualMachineSpec) validatePodFields(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.NodeName != "" {
		for _, msg := range validation.IsDNS1123Subdomain(s.NodeName) {
			errs = append(errs, field.Invalid(p.Child("nodeName"), s.NodeName, msg))
		}
	}
	errs = append(errs, validateLabels(s.NodeSelector, p.Child("nodeSelector"))...)
	if r := s.Resources; r != nil {
		rp := p.Child("resources")
		errs = append(errs, validateResourceList(r.Requests, rp.Child("requests"))...)
		errs = append(errs, validateResourceList(r.Limits, rp.Child("limits"))...)
		for name, req := range r.Requests {
			if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
				errs = append(errs, field.Invalid(rp.Child("requests").Key(string(name)), req.String(), fmt.Sprintf("must not exceed its limit (%s)", lim.String())))
			}
		}
		if len(r.Claims) > 0 {
			errs = append(errs, field.Forbidden(rp.Child("claims"), "the VM's pod has no resource claims"))
		}
	}
	if a := s.Affinity; a != nil {
		errs = append(errs, validateAffinity(a, p.Child("affinity"))...)
	}
	return errs
}

func validateResourceList(l corev1.ResourceList, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for name, q := range l {
		if q.Sign() < 0 {
			errs = append(errs, field.Invalid(p.Key(string(name)), q.String(), "must be 0 or more"))
		}
	}
	return errs
}

func validateAffinity(a *corev1.Affinity, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if na := a.NodeAffinity; na != nil {
		np := p.Child("nodeAffinity")
		if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
			rp := np.Child("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
			for i, t := range r.NodeSelectorTerms {
				errs = append(errs, validateNodeSelectorTerm(t, rp.Index(i))...)
			}
		}
		for i, t := range na.PreferredDuringSchedulingIgnoredDuringExecution {
			pp := np.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
			errs = append(errs, validateWeight(t.Weight, pp.Child("weight"))...)
			errs = append(errs, validateNodeSelectorTerm(t.Preference, pp.Child("preference"))...)
		}
	}
	if pa := a.PodAffinity; pa != nil {
		errs = append(errs, validatePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, p.Child("podAffinity"))...)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		errs = append(errs, validatePodAffinityTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, p.Child("podAntiAffinity"))...)
	}
	return errs
}

func validatePodAffinityTerms(required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range required {
		errs = append(errs, validatePodAffinityTerm(t, p.Child("requiredDuringSchedulingIgnoredDuringExecution").Index(i))...)
	}
	for i, t := range preferred {
		pp := p.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		errs = append(errs, validateWeight(t.Weight, pp.Child("weight"))...)
		errs = append(errs, validatePodAffinityTerm(t.PodAffinityTerm, pp.Child("podAffinityTerm"))...)
	}
	return errs
}

// validateWeight: the scheduler takes weights of 1 to 100.
func validateWeight(w int32, p *field.Path) field.ErrorList {
	if w < 1 || w > 100 {
		return field.ErrorList{field.Invalid(p, w, "must be between 1 and 100")}
	}
	return nil
}

func validateNodeSelectorTerm(t corev1.NodeSelectorTerm, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, f := range []struct {
		name string
		reqs []corev1.NodeSelectorRequirement
	}{{"matchExpressions", t.MatchExpressions}, {"matchFields", t.MatchFields}} {
		for i, r := range f.reqs {
			rp := p.Child(f.name).Index(i)
			if !slices.Contains(nodeSelectorOperators, r.Operator) {
				errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, nodeSelectorOperators))
				continue
			}
			errs = append(errs, validateValues(string(r.Operator), len(r.Values), rp.Child("values"))...)
		}
	}
	return errs
}

// validateValues: In and NotIn need values, Exists and DoesNotExist none,
// Gt and Lt one.
func validateValues(op string, n int, p *field.Path) field.ErrorList {
	switch {
	case (op == "In" || op == "NotIn") && n == 0:
		return field.ErrorList{field.Required(p, "for operator "+op)}
	case (op == "Exists" || op == "DoesNotExist") && n > 0:
		return field.ErrorList{field.Forbidden(p, "must be empty for operator "+op)}
	case (op == "Gt" || op == "Lt") && n != 1:
		return field.ErrorList{field.Invalid(p, n, "must have one value for operator "+op)}
	}
	return nil
}

func validatePodAffinityTerm(t corev1.PodAffinityTerm, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, s := range []struct {
		name string
		sel  *metav1.LabelSelector
	}{{"labelSelector", t.LabelSelector}, {"namespaceSelector", t.NamespaceSelector}} {
		if s.sel == nil {
			continue
		}
		for i, r := range s.sel.MatchExpressions {
			rp := p.Child(s.name, "matchExpressions").Index(i)
			if !slices.Contains(labelSelectorOperators, r.Operator) {
				errs = append(errs, field.NotSupported(rp.Child("operator"), r.Operator, labelSelectorOperators))
				continue
			}
			errs = append(errs, validateValues(string(r.Operator), len(r.Values), rp.Child("values"))...)
		}
		if len(errs) == 0 {
			errs = append(errs, metav1validation.ValidateLabelSelector(s.sel, metav1validation.LabelSelectorValidationOptions{}, p.Child(s.name))...)
		}
	}
	if t.TopologyKey == "" {
		errs = append(errs, field.Required(p.Child("topologyKey"), ""))
	}
	return errs
}
