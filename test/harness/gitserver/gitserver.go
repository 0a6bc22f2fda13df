// Package gitserver serves Git repositories over HTTP for tests, with
// git's own smart HTTP server (git http-backend) behind net/http/cgi, as a
// Git host would: Argo CD's repo server and Flux's source-controller clone
// and fetch from it like from any remote. A test commits to a repository's
// work tree with the git command; the server serves what is committed.
package gitserver

import (
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Server serves the repositories under its directory at
// http://ADDR/<name>.git.
type Server struct {
	dir  string
	addr string
}

// Start serves on host (an address of the machine or of a test's own
// bridge: nothing of the world) until t ends.
func Start(t testing.TB, host string) *Server {
	t.Helper()
	backend := filepath.Join(execPath(t), "git-http-backend")
	s := &Server{dir: t.TempDir()}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	srv := &http.Server{
		Handler: &cgi.Handler{
			Path: backend,
			Env:  []string{"GIT_PROJECT_ROOT=" + s.dir, "GIT_HTTP_EXPORT_ALL=1"},
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func execPath(t testing.TB) string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Fatalf("git --exec-path: %v (run `make deps`: it installs git)", err)
	}
	return strings.TrimSpace(string(out))
}

// Repo is a repository with a work tree, served as it is committed.
type Repo struct {
	t   testing.TB
	dir string
	// URL is what Git clients clone.
	URL string
}

// Repo makes an empty repository name on branch main, served at
// URL; t is the test that commits to it.
func (s *Server) Repo(t testing.TB, name string) *Repo {
	t.Helper()
	r := &Repo{t: t, dir: filepath.Join(s.dir, name+".git"), URL: "http://" + s.addr + "/" + name + ".git"}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	r.git("init", "--quiet", "--initial-branch", "main")
	return r
}

// Write writes files (path relative to the work tree: content) and
// commits them all with msg; an empty content removes the file. It
// returns the commit's hash.
func (r *Repo) Write(msg string, files map[string]string) string {
	r.t.Helper()
	for path, content := range files {
		p := filepath.Join(r.dir, filepath.FromSlash(path))
		if content == "" {
			if err := os.Remove(p); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.git("add", "--all")
	r.git("commit", "--quiet", "--allow-empty", "-m", msg)
	return strings.TrimSpace(r.git("rev-parse", "HEAD"))
}

func (r *Repo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=vmop test", "GIT_AUTHOR_EMAIL=test@vmop.invalid",
		"GIT_COMMITTER_NAME=vmop test", "GIT_COMMITTER_EMAIL=test@vmop.invalid",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
