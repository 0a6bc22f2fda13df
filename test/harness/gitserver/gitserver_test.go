package gitserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCloneAndFetch: a client clones what is committed, and a fetch sees
// the next commit and a removed file.
func TestCloneAndFetch(t *testing.T) {
	s := Start(t, "127.0.0.1")
	r := s.Repo(t, "vms")
	first := r.Write("two files", map[string]string{"a/one.yaml": "one\n", "two.yaml": "two\n"})
	clone := filepath.Join(t.TempDir(), "clone")
	run(t, "", "git", "clone", "--quiet", r.URL, clone)
	b, err := os.ReadFile(filepath.Join(clone, "a", "one.yaml"))
	if err != nil || string(b) != "one\n" {
		t.Fatalf("a/one.yaml in the clone: %q, %v", b, err)
	}
	if got := run(t, clone, "git", "rev-parse", "HEAD"); got != first {
		t.Fatalf("cloned %s, committed %s", got, first)
	}
	second := r.Write("remove two", map[string]string{"two.yaml": ""})
	run(t, clone, "git", "pull", "--quiet")
	if got := run(t, clone, "git", "rev-parse", "HEAD"); got != second {
		t.Fatalf("fetched %s, committed %s", got, second)
	}
	if _, err := os.Stat(filepath.Join(clone, "two.yaml")); !os.IsNotExist(err) {
		t.Fatalf("two.yaml after its removal: %v", err)
	}
}

func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
