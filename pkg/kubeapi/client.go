package kubeapi

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

const (
	// requestTimeout bounds requests other than watches.
	requestTimeout = 30 * time.Second
	// tokenMaxAge is how long a token read from a file is used before the
	// file is read again.
	tokenMaxAge = time.Minute
	// maxStatusSize bounds what is read of a response that is not a
	// success, and of a created object's echo.
	maxStatusSize = 1 << 20
)

// Client makes requests to the API server, over HTTP/2 or HTTP/1.1 as
// net/http negotiates.
type Client struct {
	server    string // without a trailing slash
	http      *http.Client
	userAgent string
	token     *token
}

// New returns a client for cfg.
func New(cfg *Config) (*Client, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("API server %q is not an http(s) URL", cfg.Server)
	}
	tr, err := sharedTransport(cfg)
	if err != nil {
		return nil, err
	}
	var rt http.RoundTripper = tr
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(rt)
	}
	return &Client{
		server:    strings.TrimSuffix(cfg.Server, "/"),
		http:      &http.Client{Transport: rt},
		userAgent: cfg.UserAgent,
		token:     &token{file: cfg.TokenFile, value: cfg.Token},
	}, nil
}

// transports are shared by the clients of the same TLS settings, so that
// they share a connection, as client-go's transport cache does: the
// runner's status reporter and its config watch make one, not two.
var (
	transportsMu sync.Mutex
	transports   = map[tlsKey]*http.Transport{}
)

// tlsKey is what tells transports apart.
type tlsKey struct {
	ca, cert, key string
	insecure      bool
}

// sharedTransport is the transport of cfg's TLS settings; they are parsed
// only for the first client that has them.
func sharedTransport(cfg *Config) (*http.Transport, error) {
	k := tlsKey{ca: string(cfg.CAData), cert: string(cfg.CertData), key: string(cfg.KeyData), insecure: cfg.Insecure}
	transportsMu.Lock()
	defer transportsMu.Unlock()
	if tr, ok := transports[k]; ok {
		return tr, nil
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.Insecure}
	if cfg.CAData != nil {
		tlsConf.RootCAs = x509.NewCertPool()
		if !tlsConf.RootCAs.AppendCertsFromPEM(cfg.CAData) {
			return nil, errors.New("API server CA data holds no PEM certificate")
		}
	}
	if cfg.CertData != nil || cfg.KeyData != nil {
		cert, err := tls.X509KeyPair(cfg.CertData, cfg.KeyData)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		tlsConf.Certificates = []tls.Certificate{cert}
	}
	// The default transport's proxy from the environment, timeouts and
	// HTTP/2 attempt, as client-go's.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConf
	// HTTP/2 multiplexes all requests on one connection: ping it when
	// silent, so that a dead one (a gone load balancer, a NAT that forgot
	// it) is closed in under a minute rather than failing every request
	// until the kernel gives up on it.
	tr.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	transports[k] = tr
	return tr, nil
}

// StatusError is a request's failure as the API server reports it: its
// Status object, or the HTTP status when the body is none.
type StatusError struct {
	Code    int    `json:"code"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("API server: %d %s", e.Code, e.Reason)
	}
	return "API server: " + e.Message
}

// Create POSTs obj as JSON to path, a collection such as
// /apis/events.k8s.io/v1/namespaces/NS/events, and decodes the created
// object into into unless it is nil. A refusal is a *StatusError.
func (c *Client) Create(ctx context.Context, path string, obj, into any) error {
	body, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return c.request(ctx, http.MethodPost, path, nil, "application/json", body, into)
}

// Get decodes the object at path into into.
func (c *Client) Get(ctx context.Context, path string, into any) error {
	return c.request(ctx, http.MethodGet, path, nil, "", nil, into)
}

// PatchType is a patch's media type.
type PatchType string

// The patches that Patch sends.
const (
	// MergePatch is a JSON merge patch (RFC 7386).
	MergePatch PatchType = "application/merge-patch+json"
	// ApplyPatch is a server-side apply; query needs a fieldManager.
	ApplyPatch PatchType = "application/apply-patch+yaml"
)

// Patch sends patch to the object at path, with query (fieldManager,
// force), and decodes the patched object into into unless it is nil.
func (c *Client) Patch(ctx context.Context, path string, typ PatchType, patch []byte, query url.Values, into any) error {
	return c.request(ctx, http.MethodPatch, path, query, string(typ), patch, into)
}

// request makes a request other than a watch, bounded by requestTimeout,
// and decodes the answer into into, or reads it to its end (so that the
// connection is reused) when into is nil.
func (c *Client) request(ctx context.Context, method, path string, query url.Values, contentType string, body []byte, into any) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := c.do(ctx, method, path, query, contentType, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if into == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxStatusSize))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		return fmt.Errorf("%s %s: the answer: %w", method, path, err)
	}
	return nil
}

// IsStatus tells whether err is the API server's answer with the HTTP
// status code (404 not found, 403 forbidden, 410 gone, ...).
func IsStatus(err error, code int) bool {
	var st *StatusError
	return errors.As(err, &st) && st.Code == code
}

// do sends a request and returns its response if it is a success (2xx),
// else a *StatusError or the error of the transport. It retries once on a
// 401 if the token file holds a new token.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, contentType string, body []byte) (*http.Response, error) {
	u := c.server + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	for retried := false; ; retried = true {
		tok, err := c.token.get()
		if err != nil {
			return nil, err
		}
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if c.userAgent != "" {
			req.Header.Set("User-Agent", c.userAgent)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := c.http.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			return resp, nil
		}
		err = statusError(resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || retried || !c.token.changed(tok) {
			return nil, err
		}
	}
}

// statusError reads the Status of a response that is not a success.
func statusError(resp *http.Response) *StatusError {
	var st StatusError
	if json.NewDecoder(io.LimitReader(resp.Body, maxStatusSize)).Decode(&st) != nil || st.Code == 0 {
		st = StatusError{Code: resp.StatusCode, Reason: http.StatusText(resp.StatusCode)}
	}
	return &st
}

// token is the bearer token, from Config.Token or Config.TokenFile.
type token struct {
	file string

	mu    sync.Mutex
	value string
	read  time.Time // when file was read; zero: read it for the next request
}

// get returns the token to send, reading the file if it is due.
func (t *token) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.file == "" || time.Since(t.read) < tokenMaxAge {
		return t.value, nil
	}
	data, err := os.ReadFile(t.file)
	v := strings.TrimSpace(string(data))
	if err == nil && v == "" {
		err = fmt.Errorf("token file %s is empty", t.file)
	}
	if err != nil {
		// The last token read may still be good; the file is read again
		// for the next request.
		if t.value != "" {
			return t.value, nil
		}
		return "", err
	}
	t.value, t.read = v, time.Now()
	return v, nil
}

// changed reads the file again after a 401 and says whether it holds a
// token other than sent.
func (t *token) changed(sent string) bool {
	if t.file == "" {
		return false
	}
	t.mu.Lock()
	t.read = time.Time{}
	t.mu.Unlock()
	v, err := t.get()
	return err == nil && v != sent
}
