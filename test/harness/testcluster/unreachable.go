package testcluster

import (
	"os"
	"path/filepath"
	"testing"
)

// UnreachableServer is an address where no API server answers.
const UnreachableServer = "https://127.0.0.1:1"

// UnreachableKubeconfig writes a kubeconfig for UnreachableServer, for
// tests of what commands do when the cluster cannot be reached.
func UnreachableKubeconfig(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	err := os.WriteFile(path, []byte(`apiVersion: v1
kind: Config
clusters:
- name: gone
  cluster: {server: "`+UnreachableServer+`"}
contexts:
- name: gone
  context: {cluster: gone, user: gone}
users:
- name: gone
  user: {token: x}
current-context: gone
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	return path
}
