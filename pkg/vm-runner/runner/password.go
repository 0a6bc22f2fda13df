package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// ErrDisplayWithoutPassword: the VM opted out of the locked display
// (display.spice.withoutPassword), so qemu's SPICE server takes no
// password.
var ErrDisplayWithoutPassword = errors.New("the display runs without a password: its VM opted out of the locked display")

// passwordRequest is a display password handed over through the pod
// (POST /display-password), applied by the loop, which owns the monitor.
type passwordRequest struct {
	Password string `json:"password"`
	Expiry   string `json:"expiry"`
	done     chan error
}

// maxPasswordRequest bounds the request's body: a password and an expiry.
const maxPasswordRequest = 4 << 10

// passwordWait bounds how long a request waits for the loop (busy with a
// slow QMP command, or not yet running).
const passwordWait = 10 * time.Second

// expiryRe is what qemu's expire_password takes: now, never, +seconds or
// seconds since the epoch.
var expiryRe = regexp.MustCompile(`^(now|never|\+?[0-9]{1,12})$`)

// servePassword takes a display password for the loop to set and answers
// once it is set. 409: the display takes no password.
func (r *Runner) servePassword(w http.ResponseWriter, req *http.Request) {
	p := passwordRequest{done: make(chan error, 1)}
	if err := json.NewDecoder(io.LimitReader(req.Body, maxPasswordRequest)).Decode(&p); err != nil {
		http.Error(w, "display password: "+err.Error(), http.StatusBadRequest)
		return
	}
	if p.Password == "" || strings.ContainsAny(p.Password, "\x00\n") {
		http.Error(w, "display password: empty, or with a line break", http.StatusBadRequest)
		return
	}
	if !expiryRe.MatchString(p.Expiry) {
		http.Error(w, fmt.Sprintf("display password: expiry %q: must be now, never, +SECONDS or SECONDS since the epoch", p.Expiry), http.StatusBadRequest)
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), passwordWait)
	defer cancel()
	err, late := askLoop(ctx, r.passwords, p, p.done)
	switch {
	case errors.Is(late, errLoopBusy):
		http.Error(w, "display password: the runner is busy: try again", http.StatusServiceUnavailable)
	case late != nil:
		http.Error(w, "display password: the runner did not set it in time", http.StatusServiceUnavailable)
	case errors.Is(err, ErrDisplayWithoutPassword):
		http.Error(w, err.Error(), http.StatusConflict)
	case err != nil:
		http.Error(w, "display password: "+err.Error(), http.StatusInternalServerError)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// errLoopBusy: the loop did not take a request within its time.
var errLoopBusy = errors.New("the runner's loop is busy")

// askLoop hands req to the loop over to and waits for its answer on done,
// both within ctx: errLoopBusy when the loop did not take it, ctx's error
// when it did not answer.
func askLoop[Req, Ans any](ctx context.Context, to chan<- Req, req Req, done <-chan Ans) (Ans, error) {
	var none Ans
	select {
	case to <- req:
	case <-ctx.Done():
		return none, errLoopBusy
	}
	select {
	case a := <-done:
		return a, nil
	case <-ctx.Done():
		return none, ctx.Err()
	}
}

// SetDisplayPassword hands a display password with its expiry to the
// runner of the VM configured in configFile (vm-runner display-password),
// which sets it at once.
func SetDisplayPassword(ctx context.Context, configFile, password, expiry string) error {
	body, err := json.Marshal(passwordRequest{Password: password, Expiry: expiry})
	if err != nil {
		return err
	}
	resp, _, err := askRunner(ctx, configFile, http.MethodPost, "/display-password", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch resp.StatusCode {
	case http.StatusNoContent:
		return nil
	case http.StatusConflict:
		return ErrDisplayWithoutPassword
	}
	return errors.New(strings.TrimSpace(string(msg)))
}
