package runnerstatus

import (
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// Role returns RoleManifest decoded, in namespace.
func Role(namespace string) (*rbacv1.Role, error) {
	var role rbacv1.Role
	if err := yaml.UnmarshalStrict(RoleManifest, &role); err != nil {
		return nil, fmt.Errorf("role.yaml: %w", err)
	}
	role.Namespace = namespace
	return &role, nil
}
