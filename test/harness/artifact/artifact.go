// Package artifact keeps files a test makes for people to look at
// (screenshots) among its artifacts: kept with go test -artifacts.
package artifact

import (
	"os"
	"path/filepath"
	"testing"
)

// Save writes data as name among the test's artifacts and logs where.
func Save(t testing.TB, name string, data []byte) {
	t.Helper()
	path := filepath.Join(t.ArtifactDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Errorf("save %s: %v", name, err)
		return
	}
	t.Logf("%s: %s", name, path)
}
