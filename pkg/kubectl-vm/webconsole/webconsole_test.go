package webconsole_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/kubectl-vm/webconsole"
	"github.com/vmop/vmop/test/harness/eventually"
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

// browser is a client with its own cookies, as a browser is.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar}
}

// open opens the page through link as a browser does and returns the
// browser and the page's URL.
func open(t *testing.T, link string) (*http.Client, string) {
	t.Helper()
	c := browser(t)
	resp, err := c.Get(link)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
	require.Contains(t, string(b), `<script type="module" src="console.js">`)
	page := *resp.Request.URL
	require.Empty(t, page.RawQuery, "the page's URL keeps no code, for a reload or a bookmark")
	return c, page.String()
}

func get(t *testing.T, c *http.Client, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	if host != "" {
		// The browser has its cookie for the name it was given: the
		// client looks its jar up by Host.
		req.Host = host
		if c.Jar != nil {
			for _, ck := range c.Jar.Cookies(req.URL) {
				req.AddCookie(ck)
			}
		}
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var testSession = webconsole.Session{Namespace: "ns", VM: "vm", Password: "pw", Expiry: 30, Command: "kubectl vm console --browser -n ns vm", Client: "spice-html5 0.2.1"}

// TestRoutes: the page, the client and the session are served to the
// browser that opened the link only, and to localhost only.
func TestRoutes(t *testing.T) {
	s, ts := newServer(t, webconsole.Config{Session: testSession})
	c, base := open(t, ts.URL+s.Link())

	for path, want := range map[string]string{
		"":                                  `<script type="module" src="console.js">`,
		"console.js":                        "import * as Spice from './spice-html5/src/main.js'",
		"spice-html5/src/main.js":           "function SpiceMainConn()",
		"spice-html5/COPYING.LESSER":        "GNU LESSER GENERAL PUBLIC LICENSE",
		"spice-html5/COPYING":               "GNU GENERAL PUBLIC LICENSE",
		"spice-html5/src/thirdparty/rsa.js": "RSAKey",
	} {
		code, body := get(t, c, base+path, "")
		require.Equal(t, http.StatusOK, code, path)
		require.Contains(t, body, want, path)
	}

	// Another client, without the browser's cookie, gets nothing: neither
	// under the page's path nor elsewhere.
	other := browser(t)
	for _, path := range []string{base, base + "session", base + "console.js", ts.URL + "/", ts.URL + "/session", ts.URL + "/AAAA/session"} {
		code, body := get(t, other, path, "")
		require.Contains(t, []int{http.StatusForbidden, http.StatusNotFound}, code, path)
		require.NotContains(t, body, "pw", path)
		require.NotContains(t, body, "SpiceMainConn", path)
	}
	code, _ := get(t, c, ts.URL+"/nothing/session", "")
	require.Equal(t, http.StatusNotFound, code)

	// A name of another site that resolves to 127.0.0.1 is refused.
	code, body := get(t, c, base+"session", "evil.example:80")
	require.Equal(t, http.StatusForbidden, code)
	require.NotContains(t, body, "pw")
	// localhost, as through an SSH tunnel to another port, is served.
	code, body = get(t, c, base+"session", "localhost:9000")
	require.Equal(t, http.StatusOK, code, body)
	var got webconsole.Session
	require.NoError(t, json.Unmarshal([]byte(body), &got))
	require.Equal(t, testSession, got)

	// Another site's page in the user's browser cannot open the bridge.
	for _, path := range []string{"events", "spice"} {
		_, resp, err := websocket.Dial(t.Context(), wsURL(base)+path, &websocket.DialOptions{HTTPClient: c,
			HTTPHeader: http.Header{"Origin": []string{"http://evil.example"}}, Subprotocols: []string{"binary"}})
		require.Error(t, err, path)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		_ = resp.Body.Close()
	}
}

// TestLinkOnce: the link lets one browser in; used again, by another
// program that read it, it opens nothing and says so.
func TestLinkOnce(t *testing.T) {
	log := &strings.Builder{}
	s, ts := newServer(t, webconsole.Config{Session: testSession, Log: log})
	c, base := open(t, ts.URL+s.Link())

	code, body := get(t, browser(t), ts.URL+s.Link(), "")
	require.Equal(t, http.StatusForbidden, code)
	require.Contains(t, body, "This link was used already")
	require.NotContains(t, body, "SpiceMainConn")
	require.Contains(t, log.String(), "The page's link was used again")
	// The browser that opened it is still in, as after a reload.
	code, _ = get(t, c, base, "")
	require.Equal(t, http.StatusOK, code)
}

// TestSessionOnce: the password goes to the page once; a second ask (a
// page in another tab, or a program with the cookie) gets what to do.
func TestSessionOnce(t *testing.T) {
	s, ts := newServer(t, webconsole.Config{Session: testSession})
	c, base := open(t, ts.URL+s.Link())
	code, body := get(t, c, base+"session", "")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `"password":"pw"`)

	code, body = get(t, c, base+"session", "")
	require.Equal(t, http.StatusGone, code)
	require.NotContains(t, body, "pw")
	require.Contains(t, body, "already gave its one-time password to a page")
	require.Contains(t, body, "run: kubectl vm console --browser -n ns vm")
}

// TestWebSocketOrigin: a WebSocket without an Origin (no browser sends
// one so; another program could) is refused, with the cookie too.
func TestWebSocketOrigin(t *testing.T) {
	s, ts := newServer(t, webconsole.Config{Session: testSession})
	c, base := open(t, ts.URL+s.Link())
	for _, path := range []string{"events", "spice"} {
		_, resp, err := websocket.Dial(t.Context(), wsURL(base)+path, &websocket.DialOptions{HTTPClient: c, Subprotocols: []string{"binary"}})
		require.Error(t, err, path)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
		_ = resp.Body.Close()
	}
	// With its page's Origin it is served.
	ws, _ := dial(t, c, base, "events", nil)
	require.NoError(t, ws.Close(websocket.StatusNormalClosure, ""))
}

// TestOpenBrowser: what $BROWSER gets on its command line, which every
// user of the machine can read in /proc, opens the page once only: the
// program that reads it after the browser did gets nothing, and the
// browser's key (its cookie) is not on it.
func TestOpenBrowser(t *testing.T) {
	s, err := webconsole.New(webconsole.Config{Session: testSession})
	require.NoError(t, err)
	link, err := s.Listen(t.Context())
	require.NoError(t, err)

	dir := t.TempDir()
	argv := filepath.Join(dir, "argv")
	script := filepath.Join(dir, "browser")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$0\" \"$@\" >"+argv+".new && mv "+argv+".new "+argv+"\n"), 0o755))
	t.Setenv("BROWSER", script)
	require.NoError(t, webconsole.OpenBrowser(link, io.Discard))
	var args []string
	eventually.Within(t, 10*time.Second, func() string {
		b, err := os.ReadFile(argv)
		if err != nil {
			return err.Error()
		}
		args = strings.Split(strings.TrimSpace(string(b)), "\n")
		return ""
	})
	require.Equal(t, []string{script, link}, args)
	cmdline := strings.Join(args, " ")

	// The browser opens it.
	c, base := open(t, args[1])
	u, err := url.Parse(base)
	require.NoError(t, err)
	cookies := c.Jar.Cookies(u)
	require.Len(t, cookies, 1)
	require.NotContains(t, cmdline, cookies[0].Value)
	code, _ := get(t, c, base+"session", "")
	require.Equal(t, http.StatusOK, code)

	// Another user, who read the command line, is too late.
	for _, path := range []string{args[1], base, base + "session"} {
		code, body := get(t, browser(t), path, "")
		require.Equal(t, http.StatusForbidden, code, path)
		require.NotContains(t, body, "pw", path)
	}
}

// TestPageClosed: the server is Closed when the last page has been gone
// for the grace period; a page back within it (a reload) keeps it open.
func TestPageClosed(t *testing.T) {
	s, ts := newServer(t, webconsole.Config{Grace: 300 * time.Millisecond})
	c, base := open(t, ts.URL+s.Link())
	openEvents := func() *websocket.Conn {
		ws, _ := dial(t, c, base, "events", nil)
		return ws
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
	page := openEvents()
	require.NoError(t, page.Close(websocket.StatusGoingAway, ""))
	page = openEvents() // reloaded
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
	c, base := open(t, ts.URL+s.Link())
	binary := &websocket.DialOptions{Subprotocols: []string{"binary"}}
	events, _ := dial(t, c, base, "events", nil)
	spice, header := dial(t, c, base, "spice", binary)
	require.Equal(t, "binary", header.Get("Sec-WebSocket-Protocol"), "spice-html5 asks for it")
	_, _, err := spice.Read(t.Context())
	require.Equal(t, websocket.StatusTryAgainLater, websocket.CloseStatus(err), "%v", err)
	// A second channel that ends the same way adds no notice.
	again, _ := dial(t, c, base, "spice", binary)
	_, _, err = again.Read(t.Context())
	require.Equal(t, websocket.StatusTryAgainLater, websocket.CloseStatus(err), "%v", err)
	later, _ := dial(t, c, base, "events", nil)
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

func wsURL(page string) string { return "ws" + strings.TrimPrefix(page, "http") }

// dial opens the page's WebSocket name as the page does (with the
// browser's cookie and the page's Origin) and returns it with the
// handshake's headers.
func dial(t *testing.T, c *http.Client, page, name string, opts *websocket.DialOptions) (*websocket.Conn, http.Header) {
	t.Helper()
	if opts == nil {
		opts = &websocket.DialOptions{}
	}
	u, err := url.Parse(page)
	require.NoError(t, err)
	opts.HTTPClient = c
	opts.HTTPHeader = http.Header{"Origin": []string{u.Scheme + "://" + u.Host}}
	ws, resp, err := websocket.Dial(t.Context(), wsURL(page)+name, opts)
	if resp != nil && resp.Body != nil {
		_ = resp.Body.Close()
	}
	require.NoError(t, err)
	return ws, resp.Header
}
