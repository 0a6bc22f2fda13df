// Package webconsole serves a VM's SPICE display to a web browser for
// "kubectl vm console --browser": a page with the SPICE HTML5 client
// (third_party/spice-html5) and WebSockets that it bridges to the display.
// It listens on 127.0.0.1 only, and answers only the browser that opened
// its link first, so that another user of the machine, who can read the
// link on the browser's command line, cannot use the bridge.
package webconsole

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/sync/singleflight"

	spicehtml5 "github.com/vmop/vmop/third_party/spice-html5"
)

// Session is what the page needs to know, served to it as JSON.
type Session struct {
	Namespace string `json:"namespace"`
	VM        string `json:"vm"`
	// Password is the display's one-time password.
	Password string `json:"password"`
	// Expiry is how long the password lets a client log in, in seconds.
	Expiry int64 `json:"expiry"`
	// Pending: nothing confirmed that the VM took the password (GitOps
	// mode has no status to say so); the page tries again for a moment.
	Pending bool `json:"pending"`
	// Command gives a new password, for the page to tell.
	Command string `json:"command"`
	// Client names the SPICE client and its licence, for the page's footer.
	Client string `json:"client"`
}

// Notice is a message from the command to the page: why the display's
// connection ended, say.
type Notice struct {
	Kind    string `json:"kind"` // "stopped", "dropped", "unreachable"
	Message string `json:"message"`
}

// Config is what a Server bridges.
type Config struct {
	Session Session
	// Dial opens a connection to the VM's SPICE port.
	Dial func(ctx context.Context) (net.Conn, error)
	// Why tells, after the display's side ended a connection or a dial
	// failed, whether the VM stopped or the way to it dropped; nil when
	// neither (the display closed it, as after a refused password).
	Why func(ctx context.Context) *Notice
	// Log gets a line for each notice, for the terminal.
	Log io.Writer
	// Grace is how long the command waits for a page that closed to come
	// back (a reload) before it ends.
	Grace time.Duration
}

// cookieName is the browser's key; its path keeps it to one console.
const cookieName = "vmop-console"

// Server is one browser console.
type Server struct {
	cfg Config
	// id is the page's path; not a secret: it is in the link.
	id string
	// token is the key of the browser that opened the link, its cookie.
	token string
	mux   *http.ServeMux

	// whyCalls lets the channels that end at once share one Why.
	whyCalls singleflight.Group

	mu sync.Mutex
	// code is the link's one-time code, "" once used.
	code string
	// sessionGiven: the page got the password; no other gets it.
	sessionGiven bool
	pages        map[*websocket.Conn]struct{}
	closing      *time.Timer // runs while no page is open
	closed       chan struct{}
	notices      []Notice // sent again to a page that opens later
}

// New makes a server with a new random link and key.
func New(cfg Config) (*Server, error) {
	if cfg.Grace == 0 {
		cfg.Grace = 3 * time.Second
	}
	s := &Server{cfg: cfg, id: rand.Text(), code: rand.Text(), token: rand.Text(),
		pages: map[*websocket.Conn]struct{}{}, closed: make(chan struct{})}
	page, err := fs.Sub(pageFiles, "web")
	if err != nil {
		return nil, err
	}
	prefix := s.Path()
	mux := http.NewServeMux()
	mux.Handle("GET "+prefix+"spice-html5/", http.StripPrefix(prefix+"spice-html5/", http.FileServerFS(spicehtml5.Files)))
	pages := http.StripPrefix(prefix, http.FileServerFS(page))
	mux.Handle("GET "+prefix+"{$}", pages)
	mux.Handle("GET "+prefix+"{file}", pages)
	mux.HandleFunc("GET "+prefix+"session", s.session)
	mux.HandleFunc("GET "+prefix+"events", s.events)
	mux.HandleFunc("GET "+prefix+"spice", s.spice)
	s.mux = mux
	return s, nil
}

// Path is the page's path.
func (s *Server) Path() string { return "/" + s.id + "/" }

// Link is the path and one-time code that open the page: what the
// browser is given. Its first use sets the browser's key, a cookie, and
// spends it, so that the link, readable on the browser's command line by
// the machine's other users, is worth nothing after.
func (s *Server) Link() string { return s.Path() + "?code=" + s.code }

// Closed is closed once the page was open and then closed for longer than
// the grace period.
func (s *Server) Closed() <-chan struct{} { return s.closed }

// ServeHTTP answers requests for localhost only (a page of another site
// that a DNS name points to 127.0.0.1 is not served), under the page's
// path, and with the key but for the link.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	if host != "127.0.0.1" && host != "localhost" && host != "::1" {
		http.Error(w, "kubectl vm console --browser answers on 127.0.0.1 and localhost only", http.StatusForbidden)
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.Header().Set("X-Frame-Options", "DENY")
	switch {
	case !strings.HasPrefix(r.URL.Path, s.Path()):
		http.NotFound(w, r)
	case r.URL.Path == s.Path() && r.URL.Query().Has("code"):
		s.redeem(w, r)
	case !s.authorized(r):
		http.Error(w, "This page opens only in the browser that opened its link (from kubectl vm console --browser). "+
			"For a new link, run: "+s.cfg.Session.Command, http.StatusForbidden)
	default:
		s.mux.ServeHTTP(w, r)
	}
}

// redeem gives the browser that opens the link first its key, and sends
// it to the page's path: a reload or a bookmark holds no code.
func (s *Server) redeem(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(r) && !s.spend(r.URL.Query().Get("code")) {
		s.log("The page's link was used again, refused: if not by you, another program on this machine read it.")
		http.Error(w, "This link was used already: it opens the page once, in one browser. "+
			"For a new link, run: "+s.cfg.Session.Command, http.StatusForbidden)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.token, Path: s.Path(),
		HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, s.Path(), http.StatusSeeOther)
}

// spend tells whether code is the link's, and makes it the last use.
func (s *Server) spend(code string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.code == "" || subtle.ConstantTimeCompare([]byte(code), []byte(s.code)) != 1 {
		return false
	}
	s.code = ""
	return true
}

// authorized tells whether r carries the browser's key.
func (s *Server) authorized(r *http.Request) bool {
	for _, c := range r.CookiesNamed(cookieName) {
		if subtle.ConstantTimeCompare([]byte(c.Value), []byte(s.token)) == 1 {
			return true
		}
	}
	return false
}

// Listen listens on a free port of 127.0.0.1 and returns the page's
// one-time link.
func (s *Server) Listen(ctx context.Context) (string, error) {
	l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return "http://" + l.Addr().String() + s.Link(), nil
}

// session gives the page the password, once: the page keeps it for a
// reload of its tab.
func (s *Server) session(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	given := s.sessionGiven
	s.sessionGiven = true
	s.mu.Unlock()
	if given {
		http.Error(w, "kubectl vm console already gave its one-time password to a page: use that page "+
			"(a reload of its tab keeps it). For a new connection, run: "+s.cfg.Session.Command, http.StatusGone)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.cfg.Session)
}

// errNoOrigin: every browser sends an Origin with a WebSocket, which
// websocket.Accept checks against the page's; a request without one is
// another program's.
var errNoOrigin = errors.New("a WebSocket without an Origin")

// accept accepts a WebSocket of the page.
func accept(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions) (*websocket.Conn, error) {
	if r.Header.Get("Origin") == "" {
		http.Error(w, errNoOrigin.Error()+" is refused", http.StatusForbidden)
		return nil, errNoOrigin
	}
	return websocket.Accept(w, r, opts)
}

func (s *Server) log(line string) {
	if s.cfg.Log != nil {
		fmt.Fprintln(s.cfg.Log, line)
	}
}

// events is the page's line to the command: its notices, and the page's
// presence (the command ends when the page closes).
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	c, err := accept(w, r, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	s.pages[c] = struct{}{}
	if s.closing != nil {
		s.closing.Stop()
		s.closing = nil
	}
	notices := append([]Notice(nil), s.notices...)
	s.mu.Unlock()
	for _, n := range notices {
		send(r.Context(), c, n)
	}
	<-c.CloseRead(r.Context()).Done()
	s.mu.Lock()
	delete(s.pages, c)
	if len(s.pages) == 0 && s.closing == nil {
		s.closing = time.AfterFunc(s.cfg.Grace, s.closeIfNoPage)
	}
	s.mu.Unlock()
	_ = c.CloseNow()
}

func (s *Server) closeIfNoPage() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pages) == 0 && s.closing != nil {
		select {
		case <-s.closed:
		default:
			close(s.closed)
		}
	}
}

// notify tells every open page, and the pages that open later, once:
// each of the client's channels sees the same end.
func (s *Server) notify(ctx context.Context, n Notice) {
	s.mu.Lock()
	if len(s.notices) > 0 && s.notices[len(s.notices)-1] == n {
		s.mu.Unlock()
		return
	}
	s.notices = append(s.notices, n)
	pages := make([]*websocket.Conn, 0, len(s.pages))
	for c := range s.pages {
		pages = append(pages, c)
	}
	s.mu.Unlock()
	s.log(n.Message)
	for _, c := range pages {
		send(ctx, c, n)
	}
}

func send(ctx context.Context, c *websocket.Conn, n Notice) {
	b, _ := json.Marshal(n)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = c.Write(ctx, websocket.MessageText, b)
}

// spice bridges one SPICE channel (the client opens one WebSocket per
// channel) to a new connection to the display. spice-html5 asks for the
// "binary" subprotocol.
func (s *Server) spice(w http.ResponseWriter, r *http.Request) {
	c, err := accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"binary"}})
	if err != nil {
		return
	}
	defer func() { _ = c.CloseNow() }()
	// The bridge outlives the request's context, which ends with the
	// handler; the connections end it.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	display, err := s.cfg.Dial(ctx)
	if err != nil {
		n := s.why(ctx)
		if n == nil {
			n = &Notice{Kind: "unreachable", Message: fmt.Sprintf("Cannot reach the VM's display: %v", err)}
		}
		s.notify(ctx, *n)
		c.Close(websocket.StatusTryAgainLater, truncate(n.Message))
		return
	}
	defer display.Close()
	page := websocket.NetConn(ctx, c, websocket.MessageBinary)
	ended := make(chan bool, 2) // true: the display's side ended first
	go func() {
		_, _ = io.Copy(display, page)
		ended <- false
	}()
	go func() {
		_, _ = io.Copy(&drain{w: page}, display)
		ended <- true
	}()
	if <-ended {
		_ = page.Close()
		if n := s.why(ctx); n != nil {
			s.notify(ctx, *n)
		}
		return
	}
	// The page went first: half-close, and read the display out until it
	// closes too, so that a port forward ends its stream rather than write
	// into a closed socket (which client-go logs as an error).
	if hc, ok := display.(interface{ CloseWrite() error }); ok && hc.CloseWrite() == nil {
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
		}
	}
}

// drain writes to w until w fails, then discards what it is given.
type drain struct {
	w      io.Writer
	failed bool
}

func (d *drain) Write(p []byte) (int, error) {
	if !d.failed {
		if _, err := d.w.Write(p); err != nil {
			d.failed = true
		}
	}
	return len(p), nil
}

// why runs Why once for the channels that ask together: every channel of
// the client ends at once when the display goes, and each would watch
// the VM's pod for the same answer.
func (s *Server) why(ctx context.Context) *Notice {
	if s.cfg.Why == nil {
		return nil
	}
	n, _, _ := s.whyCalls.Do("why", func() (any, error) { return s.cfg.Why(ctx), nil })
	return n.(*Notice)
}

// truncate keeps a close reason within WebSocket's 123 bytes.
func truncate(s string) string {
	if len(s) <= 120 {
		return s
	}
	return strings.ToValidUTF8(s[:120], "")
}
