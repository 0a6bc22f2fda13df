package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/vmop/vmop/pkg/runnerconfig"
)

// probeSocket is where the runner answers readiness checks (vm-runner
// probe) and connections to the guest's ports (vm-runner connect): a unix
// socket, so nothing is exposed on the (often host) network.
func probeSocket(runtimeDir string) string { return filepath.Join(runtimeDir, "runner.sock") }

const (
	// loopBeat is how often the loop notes that it turns.
	loopBeat = 10 * time.Second
	// loopStale is how long the loop may not turn before the liveness
	// probe fails: long, since the loop may wait on a qemu whose monitor
	// stalls for minutes; longer than watchQemu takes to kill a qemu that
	// never answers again (qmpDeadMisses), which then tells why.
	loopStale = 6 * time.Minute
)

// serveProbe answers GET /readyz with 200 while the VM runs, GET /livez
// while the loop turns, POST /connect (see serveConnect), POST
// /display-password (servePassword), POST /freeze and /thaw
// (serveFreeze).
func (r *Runner) serveProbe() (stop func(), err error) {
	sock := probeSocket(r.runtimeDir)
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.ready.Load() {
			why := "the VM is not running"
			if p := r.paused.Load(); p != nil {
				why = *p
			}
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, _ *http.Request) {
		if last := r.beat.Load(); last != 0 {
			if since := time.Since(time.Unix(0, last)); since > r.loopStale {
				http.Error(w, fmt.Sprintf("the runner's loop has not turned for %s: it is stuck, and the VM cannot be managed", since.Round(time.Second)),
					http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /connect", r.serveConnect)
	mux.HandleFunc("POST /display-password", r.servePassword)
	mux.HandleFunc("POST /freeze", r.serveFreeze)
	mux.HandleFunc("POST /thaw", r.serveFreeze)
	mux.HandleFunc("POST /push", r.servePush)
	mux.HandleFunc("GET /disks", r.serveDisks)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close() }, nil
}

// Probe asks the runner of the VM configured in configFile whether its VM
// runs: the readiness check of the pod (vm-runner probe); with live,
// whether the runner answers and its loop turns: the liveness check
// (vm-runner probe --live).
func Probe(ctx context.Context, configFile string, live bool) error {
	path := "/readyz"
	if live {
		path = "/livez"
	}
	resp, _, err := askRunner(ctx, configFile, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return errors.New(string(body))
	}
	return nil
}

// askRunner sends a request for path to the runner of the VM configured
// in configFile, over its socket (returned too, for errors). One
// connection per request: a request to /connect lasts as long as its
// connection, which closing the answer's body ends.
func askRunner(ctx context.Context, configFile, method, path string, body io.Reader) (*http.Response, string, error) {
	c, err := runnerconfig.Load(configFile)
	if err != nil {
		return nil, "", err
	}
	sock := probeSocket(RuntimeDir(c))
	client := &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	req, err := http.NewRequestWithContext(ctx, method, "http://runner"+path, body)
	if err != nil {
		return nil, sock, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, sock, fmt.Errorf("no runner answers on %s (is the VM running?): %w", sock, err)
	}
	return resp, sock, nil
}
