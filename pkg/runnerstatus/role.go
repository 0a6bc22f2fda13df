package runnerstatus

import (
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// RoleManifest is the Role "vm-runner" with the least rights the Reporter
// needs; bind it to the runner pod's service account.
//
//go:embed role.yaml
var RoleManifest []byte

// Role returns RoleManifest decoded, in namespace.
func Role(namespace string) (*rbacv1.Role, error) {
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(RoleManifest, &role); err != nil {
		return nil, fmt.Errorf("role.yaml: %w", err)
	}
	role.Namespace = namespace
	return &role, nil
}
