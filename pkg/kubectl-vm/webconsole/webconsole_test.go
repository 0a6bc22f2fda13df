package webconsole_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/kubectl-vm/webconsole"
)

func newServer(t *testing.T, cfg webconsole.Config) (*webconsole.Server, *httptest.Server) {
	t.Helper()
	if cfg.Dial == nil {
		cfg.Dial = func(ctx context.Context) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", "127.0.0.1:1")
		}
	}
	s, err := webconsole.New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts
}

func get(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// TestRoutes: the page, the client and the session are served under the
// token only, and to localhost only.
func TestRoutes(t *testing.T) {
	session := webconsole.Session{Namespace: "ns", VM: "vm", Password: "pw", Expiry: 30, Command: "kubectl vm console --browser -n ns vm", Client: "spice-html5 0.2.1"}
	s, ts := newServer(t, webconsole.Config{Session: session})
	base := ts.URL + s.Path()
	require.Len(t, strings.Trim(s.Path(), "/"), 32, "a 24-byte token")

	for path, want := range map[string]string{
		"":                                  `<script type="module" src="console.js">`,
		"console.js":                        "import * as Spice from './spice-html5/src/main.js'",
		"spice-html5/src/main.js":           "function SpiceMainConn()",
		"spice-html5/COPYING.LESSER":        "GNU LESSER GENERAL PUBLIC LICENSE",
		"spice-html5/COPYING":               "GNU GENERAL PUBLIC LICENSE",
		"spice-html5/src/thirdparty/rsa.js": "RSAKey",
	} {
		code, body := get(t, base+path, "")
		require.Equal(t, http.StatusOK, code, path)
		require.Contains(t, body, want, path)
	}
	code, body := get(t, base+"session", "")
	require.Equal(t, http.StatusOK, code)
	var got webconsole.Session
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, session, got)

	// Without the token, or with another, nothing is served.
	for _, path := range []string{"/", "/session", "/spice-html5/src/main.js", "/AAAA/session", s.Path() + "nothing"} {
		code, _ := get(t, ts.URL+path, "")
		require.Equal(t, http.StatusNotFound, code, path)
	}
	// A name of another site that resolves to 127.0.0.1 is refused.
	code, body = get(t, base+"session", "evil.example:80")
	require.Equal(t, http.StatusForbidden, code)
	require.NotContains(t, body, "pw")
	// localhost, as through an SSH tunnel to another port, is served.
	code, _ = get(t, base+"session", "localhost:9000")
	require.Equal(t, http.StatusOK, code)

	// Another site's page in the user's browser cannot open the bridge.
	ws := "ws" + strings.TrimPrefix(base, "http")
	for _, path := range []string{"events", "spice"} {
		_, resp, err := websocket.Dial(t.Context(), ws+path, &websocket.DialOptions{
			HTTPHeader: http.Header{"Origin": []string{"http://evil.example"}}, Subprotocols: []string{"binary"}})
		require.Error(t, err, path)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		_ = resp.Body.Close()
	}
}

// TestPageClosed: the server is Closed when the last page has been gone
// for the grace period; a page back within it (a reload) keeps it open.
func TestPageClosed(t *testing.T) {
	s, ts := newServer(t, webconsole.Config{Grace: 300 * time.Millisecond})
	url := "ws" + strings.TrimPrefix(ts.URL, "http") + s.Path() + "events"
	open := func() *websocket.Conn {
		c, _ := dial(t, url, nil)
		return c
	}
	closed := func(within time.Duration) bool {
		select {
		case <-s.Closed():
			return true
		case <-time.After(within):
			return false
		}
	}
	require.False(t, closed(500*time.Millisecond), "closed before a page was open")
	page := open()
	require.NoError(t, page.Close(websocket.StatusGoingAway, ""))
	page = open() // reloaded
	require.False(t, closed(600*time.Millisecond), "closed while a page was open again")
	require.NoError(t, page.Close(websocket.StatusGoingAway, ""))
	require.True(t, closed(5*time.Second), "not closed after the page was")
}

// TestNotice: a display that cannot be reached closes the page's channel
// and every page hears why, also one opened later.
func TestNotice(t *testing.T) {
	why := &webconsole.Notice{Kind: "stopped", Message: "The VM ns/vm stopped."}
	s, ts := newServer(t, webconsole.Config{
		Why: func(context.Context) *webconsole.Notice { return why },
	})
	ws := "ws" + strings.TrimPrefix(ts.URL, "http") + s.Path()
	events, _ := dial(t, ws+"events", nil)
	spice, header := dial(t, ws+"spice", &websocket.DialOptions{Subprotocols: []string{"binary"}})
	require.Equal(t, "binary", header.Get("Sec-WebSocket-Protocol"), "spice-html5 asks for it")
	_, _, err := spice.Read(t.Context())
	require.Equal(t, websocket.StatusTryAgainLater, websocket.CloseStatus(err), "%v", err)
	// A second channel that ends the same way adds no notice.
	again, _ := dial(t, ws+"spice", &websocket.DialOptions{Subprotocols: []string{"binary"}})
	_, _, err = again.Read(t.Context())
	require.Equal(t, websocket.StatusTryAgainLater, websocket.CloseStatus(err), "%v", err)
	later, _ := dial(t, ws+"events", nil)
	for _, c := range []*websocket.Conn{events, later} {
		_, b, err := c.Read(t.Context())
		require.NoError(t, err)
		var n webconsole.Notice
		require.NoError(t, json.Unmarshal(b, &n))
		require.Equal(t, *why, n)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, b, err := later.Read(ctx)
	require.Error(t, err, "a second notice: %s", b)
}

// dial opens a WebSocket and returns it with the handshake's headers.
func dial(t *testing.T, url string, opts *websocket.DialOptions) (*websocket.Conn, http.Header) {
	t.Helper()
	c, resp, err := websocket.Dial(t.Context(), url, opts)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	require.NoError(t, err)
	return c, resp.Header
}
