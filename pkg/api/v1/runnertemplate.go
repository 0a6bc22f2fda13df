package v1

import (
	"errors"
	"regexp"
	"strings"
)

// StandardTemplate is the runner's qemu command template that a VM gets
// when its runnerTemplate names none, or names VM-Operator's standard
// template.
const StandardTemplate = "standard.tmpl"

// vmOperatorStandard is VM-Operator's standard template, which its
// manifests name by path (/opt/vmrunner/templates/Standard-VM-latest.ftl.yaml):
// a FreeMarker template, whose place vmop's standard one takes.
var vmOperatorStandard = regexp.MustCompile(`^(.*/)?Standard-VM-[^/]*\.ftl\.yaml$`)

// IsVMOperatorStandard tells whether source names VM-Operator's standard
// template.
func IsVMOperatorStandard(source string) bool { return vmOperatorStandard.MatchString(source) }

// TemplateName returns the name of the runner's template that a
// runnerTemplate source selects: StandardTemplate for none and for
// VM-Operator's standard template, else source, which must be a file name
// (the runner looks it up in its template directories).
func TemplateName(source string) (string, error) {
	switch {
	case source == "" || IsVMOperatorStandard(source):
		return StandardTemplate, nil
	case strings.Contains(source, "/") || source == "." || source == "..":
		return "", errors.New("a template name must not contain a directory: " + source)
	}
	return source, nil
}
