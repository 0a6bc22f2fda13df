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

// serveProbe answers GET /readyz with 200 while the VM runs, POST
// /connect (see serveConnect) and POST /display-password (servePassword).
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
			http.Error(w, "the VM is not running", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("POST /connect", r.serveConnect)
	mux.HandleFunc("POST /display-password", r.servePassword)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(l) }()
	return func() { _ = srv.Close() }, nil
}

// Probe asks the runner of the VM configured in configFile whether its VM
// runs: the readiness check of the pod (vm-runner probe).
func Probe(ctx context.Context, configFile string) error {
	client, sock, err := probeClient(configFile)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://runner/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("no runner answers on %s: %w", sock, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return errors.New(string(body))
	}
	return nil
}

// probeClient is an HTTP client of the runner of the VM configured in
// configFile, and its socket. One connection per request: a request to
// /connect lasts as long as its connection.
func probeClient(configFile string) (*http.Client, string, error) {
	c, err := runnerconfig.Load(configFile)
	if err != nil {
		return nil, "", err
	}
	sock := probeSocket(RuntimeDir(c))
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}, sock, nil
}
