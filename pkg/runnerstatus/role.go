package runnerstatus

import _ "embed"

// RoleManifest is the Role "vm-runner" with the least rights the Reporter
// needs; bind it to the runner pod's service account.
//
//go:embed role.yaml
var RoleManifest []byte
