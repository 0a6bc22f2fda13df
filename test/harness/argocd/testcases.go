package argocd

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// TestCase is an entry of a health_test.yaml, the format of Argo CD's own
// health check tests (resource_customizations/<group>/<kind>/): the
// object in InputPath, relative to the file, has the health HealthStatus.
// health_test.yaml next to health.lua holds the expected health of the
// fixtures that test/e2e takes from a live cluster; both the package's
// test and test/e2e check against it.
type TestCase struct {
	InputPath    string `json:"inputPath"`
	HealthStatus Status `json:"healthStatus"`
}

// ReadTestCases reads a health_test.yaml.
func ReadTestCases(file string) ([]TestCase, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var f struct {
		Tests []TestCase `json:"tests"`
	}
	if err := yaml.UnmarshalStrict(b, &f); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return f.Tests, nil
}
