package kubeapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/test/harness/eventually"
)

func TestFromKubeconfig(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "certs"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "certs", "ca.crt"), []byte("CA FILE"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "certs", "client.key"), []byte("KEY FILE"), 0o600))
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	// kubeconfig has a cluster "c" and the user "u" given.
	kubeconfig := func(cluster, user string) string {
		return `apiVersion: v1
kind: Config
current-context: ctx
contexts:
- name: other
  context: {cluster: nope, user: nope}
- name: ctx
  context: {cluster: c, user: u, namespace: default}
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
` + cluster + `
users:
- name: someone-else
  user: {token: not-this}
- name: u
  user:
` + user
	}
	for _, tc := range []struct {
		name, kubeconfig string
		want             *Config
		wantErr          []string // in the error, beside the file's name
	}{{
		name:       "token and CA data",
		kubeconfig: kubeconfig("    certificate-authority-data: "+b64("CA DATA"), "    token: secret"),
		want:       &Config{Server: "https://10.0.0.1:6443", CAData: []byte("CA DATA"), Token: "secret"},
	}, {
		name:       "token file and CA file, relative",
		kubeconfig: kubeconfig("    certificate-authority: certs/ca.crt", "    tokenFile: token"),
		want:       &Config{Server: "https://10.0.0.1:6443", CAData: []byte("CA FILE"), TokenFile: filepath.Join(dir, "token")},
	}, {
		name: "client certificate data and key file, insecure",
		kubeconfig: kubeconfig("    insecure-skip-tls-verify: true",
			"    client-certificate-data: "+b64("CERT DATA")+"\n    client-key: "+filepath.Join(dir, "certs", "client.key")),
		want: &Config{Server: "https://10.0.0.1:6443", Insecure: true, CertData: []byte("CERT DATA"), KeyData: []byte("KEY FILE")},
	}, {
		name: "exec plugin",
		kubeconfig: kubeconfig("", `    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: aws`),
		wantErr: []string{`user "u"`, "exec plugin", "tokenFile", "client-certificate"},
	}, {
		name:       "missing CA file",
		kubeconfig: kubeconfig("    certificate-authority: nope.crt", "    token: secret"),
		wantErr:    []string{"nope.crt"},
	}, {
		name:       "no current context",
		kubeconfig: "apiVersion: v1\nkind: Config\nclusters: []\n",
		wantErr:    []string{"no current-context"},
	}, {
		name:       "current context missing",
		kubeconfig: "apiVersion: v1\nkind: Config\ncurrent-context: gone\n",
		wantErr:    []string{`current-context "gone"`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "kubeconfig")
			require.NoError(t, os.WriteFile(path, []byte(tc.kubeconfig), 0o600))
			cfg, err := FromKubeconfig(path)
			if tc.wantErr != nil {
				require.Error(t, err)
				for _, s := range append(tc.wantErr, path) {
					assert.Contains(t, err.Error(), s)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg)
		})
	}
}

func TestInClusterOutsidePod(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	_, err := InCluster()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not running in a Kubernetes pod")
}

// newServer starts a TLS server with HTTP/2, as the API server, and returns
// a config to reach it with token.
func newServer(t *testing.T, h http.HandlerFunc) *Config {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return &Config{Server: srv.URL, CAData: ca, Token: "token", UserAgent: "kubeapi-test"}
}

// record is a log of what a test's server and handler saw, in order.
type record struct {
	mu    sync.Mutex
	lines []string
}

func (r *record) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *record) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

type pod struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func (r *record) Replace(pods []pod) {
	var names []string
	for _, p := range pods {
		names = append(names, p.Metadata.Name)
	}
	r.add("Replace %v", names)
}

func (r *record) Apply(typ EventType, p pod) { r.add("Apply %s %s", typ, p.Metadata.Name) }

func podJSON(name, rv string) string {
	return fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"uid":"uid-%s","resourceVersion":%q,"labels":{"a":"b"}},"spec":{"nodeName":"n1"}}`, name, name, rv)
}

func podList(rv string, pods ...string) string {
	return fmt.Sprintf(`{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":%q},"items":[%s]}`, rv, strings.Join(pods, ","))
}

func event(typ, object string) string { return fmt.Sprintf(`{"type":%q,"object":%s}`, typ, object) }

// The fake API server fails the first list, then serves a list and a watch
// that reports each kind of event and ends; the watch from its last
// resourceVersion expires with an ERROR event, the next with a 410 status,
// each time the client lists again. The query is passed on, failures are
// logged once.
func TestWatch(t *testing.T) {
	var rec record
	var lists atomic.Int32
	selectors := url.Values{"fieldSelector": {"spec.nodeName=n1"}, "labelSelector": {"app.kubernetes.io/managed-by=vm-operator"}}
	cfg := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/api/v1/pods" || q.Get("fieldSelector") != selectors.Get("fieldSelector") ||
			q.Get("labelSelector") != selectors.Get("labelSelector") || r.Header.Get("Authorization") != "Bearer token" {
			rec.add("bad request %s", r.URL)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if q.Get("watch") == "" {
			n := lists.Add(1)
			rec.add("list %d", n)
			switch n {
			case 1:
				w.WriteHeader(http.StatusInternalServerError)
				fmt.Fprint(w, `{"kind":"Status","status":"Failure","message":"etcd is down","reason":"InternalError","code":500}`)
			case 2:
				fmt.Fprint(w, podList("10", podJSON("a", "5"), podJSON("b", "6")))
			case 3:
				fmt.Fprint(w, podList("30", podJSON("a", "12"), podJSON("c", "11")))
			default:
				fmt.Fprint(w, podList("40", podJSON("c", "11")))
			}
			return
		}
		rv := q.Get("resourceVersion")
		rec.add("watch %s", rv)
		if q.Get("watch") != "1" || q.Get("allowWatchBookmarks") != "true" || q.Get("timeoutSeconds") != "300" {
			rec.add("bad watch query %s", r.URL.RawQuery)
		}
		switch rv {
		case "10":
			for _, ev := range []string{
				event("ADDED", podJSON("c", "11")),
				event("MODIFIED", podJSON("a", "12")),
				event("DELETED", podJSON("b", "13")),
				event("BOOKMARK", `{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"20"}}`),
			} {
				fmt.Fprintln(w, ev)
				w.(http.Flusher).Flush()
			}
		case "20":
			fmt.Fprintln(w, event("ERROR", `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 20 (25)","reason":"Expired","code":410}`))
		case "30":
			w.WriteHeader(http.StatusGone)
			fmt.Fprint(w, `{"kind":"Status","status":"Failure","message":"too old resource version: 30 (35)","reason":"Expired","code":410}`)
		default:
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}
	})
	c, err := New(cfg)
	require.NoError(t, err)
	var logBuf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, nil))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- Watch(ctx, c, "/api/v1/pods", selectors, Handler[pod](&rec), log) }()

	want := []string{
		"list 1",
		"list 2",
		"Replace [a b]",
		"watch 10",
		"Apply ADDED c",
		"Apply MODIFIED a",
		"Apply DELETED b",
		"watch 20",
		"list 3",
		"Replace [a c]",
		"watch 30",
		"list 4",
		"Replace [c]",
		"watch 40",
	}
	eventually.Within(t, 5*time.Second, func() string {
		if got := rec.get(); len(got) < len(want) {
			return fmt.Sprintf("so far: %q", got)
		}
		return ""
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not return after its context ended")
	}
	assert.Equal(t, want, rec.get())
	logged := logBuf.String()
	assert.Equal(t, 1, strings.Count(logged, "etcd is down"), logged)
	assert.Contains(t, logged, "watch works again")
	assert.NotContains(t, logged, "too old", "410 is no failure to log")
}

// Create posts JSON; a refusal's error has the Status's message, or the
// HTTP status when the body is no Status.
func TestCreate(t *testing.T) {
	cfg := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		var obj map[string]string
		if r.Method != http.MethodPost || r.URL.Path != "/apis/events.k8s.io/v1/namespaces/ns/events" ||
			r.Header.Get("Content-Type") != "application/json" || r.UserAgent() != "kubeapi-test" ||
			json.NewDecoder(r.Body).Decode(&obj) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		switch obj["note"] {
		case "ok":
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{"kind":"Event","metadata":{"name":"e"}}`)
		case "invalid":
			w.WriteHeader(http.StatusUnprocessableEntity)
			fmt.Fprint(w, `{"kind":"Status","status":"Failure","message":"Event.events.k8s.io \"e\" is invalid: reason: Required value","reason":"Invalid","code":422}`)
		default:
			http.Error(w, "<html>no</html>", http.StatusServiceUnavailable)
		}
	})
	c, err := New(cfg)
	require.NoError(t, err)
	const path = "/apis/events.k8s.io/v1/namespaces/ns/events"
	var created struct {
		Metadata struct{ Name string } `json:"metadata"`
	}
	require.NoError(t, c.Create(t.Context(), path, map[string]string{"note": "ok"}, &created))
	assert.Equal(t, "e", created.Metadata.Name, "the echo is decoded")
	require.NoError(t, c.Create(t.Context(), path, map[string]string{"note": "ok"}, nil))

	err = c.Create(t.Context(), path, map[string]string{"note": "invalid"}, nil)
	var st *StatusError
	require.ErrorAs(t, err, &st)
	assert.Equal(t, StatusError{Code: 422, Reason: "Invalid", Message: `Event.events.k8s.io "e" is invalid: reason: Required value`}, *st)
	assert.Contains(t, err.Error(), "is invalid: reason: Required value")
	assert.True(t, IsStatus(err, http.StatusUnprocessableEntity))
	assert.False(t, IsStatus(err, http.StatusNotFound))

	err = c.Create(t.Context(), path, map[string]string{"note": "proxy"}, nil)
	require.ErrorAs(t, err, &st)
	assert.Equal(t, http.StatusServiceUnavailable, st.Code)
}

// Get decodes the object; Patch sends its media type and query, and
// decodes the answer; a 404 is a StatusError.
func TestGetAndPatch(t *testing.T) {
	const path = "/apis/vmoperator.jdrupes.org/v1/namespaces/ns/vms/vm"
	var rec record
	cfg := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.add("%s %s?%s %s %s", r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), body)
		if r.URL.Path != path && r.URL.Path != path+"/status" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"kind":"Status","status":"Failure","message":"vms \"x\" not found","reason":"NotFound","code":404}`)
			return
		}
		fmt.Fprint(w, `{"kind":"VirtualMachine","metadata":{"name":"vm","generation":3}}`)
	})
	c, err := New(cfg)
	require.NoError(t, err)
	var vm struct {
		Metadata struct{ Generation int64 } `json:"metadata"`
	}
	require.NoError(t, c.Get(t.Context(), path, &vm))
	assert.EqualValues(t, 3, vm.Metadata.Generation)

	vm.Metadata.Generation = 0
	query := url.Values{"fieldManager": {"m"}, "force": {"true"}}
	require.NoError(t, c.Patch(t.Context(), path+"/status", ApplyPatch, []byte(`{"status":{}}`), query, &vm))
	assert.EqualValues(t, 3, vm.Metadata.Generation)
	require.NoError(t, c.Patch(t.Context(), path, MergePatch, []byte(`{"spec":{}}`), nil, nil))

	err = c.Get(t.Context(), "/apis/vmoperator.jdrupes.org/v1/namespaces/ns/vms/x", nil)
	assert.True(t, IsStatus(err, http.StatusNotFound), "%v", err)
	assert.Equal(t, []string{
		"GET " + path + "?  ",
		"PATCH " + path + "/status?fieldManager=m&force=true application/apply-patch+yaml {\"status\":{}}",
		"PATCH " + path + "? application/merge-patch+json {\"spec\":{}}",
		"GET /apis/vmoperator.jdrupes.org/v1/namespaces/ns/vms/x?  ",
	}, rec.get())
}

// The token file is read again after a minute, and at once on a 401: the
// request is then retried with the new token.
func TestTokenFile(t *testing.T) {
	var rec record
	var mu sync.Mutex
	valid := "a b" // tokens the server accepts
	cfg := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		mu.Lock()
		ok := strings.Contains(valid, tok)
		mu.Unlock()
		if !ok {
			rec.add("401 %s", tok)
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"kind":"Status","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
			return
		}
		rec.add("201 %s", tok)
		w.WriteHeader(http.StatusCreated)
	})
	tokenFile := filepath.Join(t.TempDir(), "token")
	cfg.Token, cfg.TokenFile = "", tokenFile
	write := func(tok string) { require.NoError(t, os.WriteFile(tokenFile, []byte(tok+"\n"), 0o600)) }
	write("a")
	c, err := New(cfg)
	require.NoError(t, err)
	create := func() error { return c.Create(t.Context(), "/api/v1/namespaces/ns/events", struct{}{}, nil) }

	require.NoError(t, create())
	write("b")
	require.NoError(t, create()) // read less than a minute ago
	c.token.read = c.token.read.Add(-tokenMaxAge)
	require.NoError(t, create())

	mu.Lock()
	valid = "c" // rotated
	mu.Unlock()
	write("c")
	require.NoError(t, create())

	mu.Lock()
	valid = "d" // revoked: no retry with the same token
	mu.Unlock()
	var st *StatusError
	require.ErrorAs(t, create(), &st)
	assert.Equal(t, http.StatusUnauthorized, st.Code)

	assert.Equal(t, []string{"201 a", "201 a", "201 b", "401 b", "201 c", "401 c"}, rec.get())
}

// Errors of New name what is wrong.
func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Server: "10.0.0.1:6443"}, "not an http(s) URL"},
		{Config{Server: "https://10.0.0.1:6443", CAData: []byte("nope")}, "no PEM certificate"},
		{Config{Server: "https://10.0.0.1:6443", CertData: []byte("nope")}, "client certificate"},
	} {
		_, err := New(&tc.cfg)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err := New(&Config{Server: "https://10.0.0.1:6443/"})
	require.NoError(t, err)
}

// Clients of the same TLS settings share a transport, and so a
// connection; other settings get their own.
func TestClientsShareTransport(t *testing.T) {
	a, err := New(&Config{Server: "https://127.0.0.1:1", Token: "a", UserAgent: "one"})
	require.NoError(t, err)
	b, err := New(&Config{Server: "https://127.0.0.1:1", Token: "b", UserAgent: "two"})
	require.NoError(t, err)
	assert.Same(t, a.http.Transport, b.http.Transport)
	c, err := New(&Config{Server: "https://127.0.0.1:1", Insecure: true})
	require.NoError(t, err)
	assert.NotSame(t, a.http.Transport, c.http.Transport)
}
