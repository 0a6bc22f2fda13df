package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
)

// Freezing the guest's file systems for a consistent snapshot (vm-runner
// freeze and thaw, which snapshots and Velero's backup hooks run in the
// VM's pod): through the guest agent, and never for longer than the
// freeze's timeout, after which the runner thaws them itself, so that a
// snapshot tool that died leaves no guest frozen.
const (
	// DefaultFreezeTimeout bounds a freeze that names no timeout.
	DefaultFreezeTimeout = time.Minute
	// MaxFreezeTimeout bounds any freeze: a guest's writes wait meanwhile.
	MaxFreezeTimeout = 10 * time.Minute
	// freezeWait bounds the agent's freeze, which first syncs every file
	// system, and its thaw.
	freezeWait = 2 * time.Minute
)

// ErrNoAgent: no guest agent answers, so the guest cannot be frozen; a
// snapshot taken now is crash-consistent.
var ErrNoAgent = errors.New("no guest agent is connected: the guest's file systems cannot be frozen, and a snapshot now is crash-consistent")

// ErrPaused: qemu holds the guest paused, so it cannot be frozen; a
// snapshot taken now holds its disks as they were when it paused.
var ErrPaused = errors.New("the guest is paused: it was not frozen")

// freezeRequest is a freeze (timeout > 0) or a thaw handed to the loop.
type freezeRequest struct {
	timeout time.Duration
	done    chan freezeResult
}

type freezeResult struct {
	fileSystems int
	err         error
}

// frozen is the runner's freeze: since when, and the timer that thaws it.
type frozen struct {
	since    time.Time
	timeout  time.Duration
	deadline *time.Timer
}

// freezeExpiry is the channel of the running freeze's deadline; nil
// without one.
func (r *Runner) freezeExpiry() <-chan time.Time {
	if r.freeze == nil {
		return nil
	}
	return r.freeze.deadline.C
}

// freezeGuest freezes the guest's file systems for at most timeout, or
// thaws them (timeout 0); it returns how many file systems it froze or
// thawed. A freeze while frozen starts the timeout again.
func (r *Runner) freezeGuest(ctx context.Context, timeout time.Duration) (int, error) {
	if timeout == 0 {
		return r.thawGuest(ctx, ReasonThawed, "")
	}
	if why := r.paused.Load(); why != nil {
		// Its agent would not answer until the guest goes on.
		return 0, fmt.Errorf("%w (%s)", ErrPaused, *why)
	}
	if !r.live.agentConnected {
		return 0, ErrNoAgent
	}
	if r.live.stopping {
		return 0, errors.New("the guest is shutting down")
	}
	n, err := r.fsfreeze(ctx, "guest-fsfreeze-freeze")
	if err != nil {
		// A freeze cut short may leave some file systems frozen.
		if _, terr := r.thawGuest(ctx, ReasonThawed, "the freeze failed"); terr != nil {
			r.log.Error("Thawing after a failed freeze", "err", terr)
		}
		return 0, fmt.Errorf("freezing the guest's file systems: %w", err)
	}
	if r.freeze != nil {
		r.freeze.deadline.Stop()
	} else {
		r.freeze = &frozen{since: time.Now()}
	}
	r.freeze.timeout = timeout
	r.freeze.deadline = time.NewTimer(timeout)
	r.log.Info("Guest frozen", "fileSystems", n, "timeout", timeout)
	r.event(ctx, Event{Reason: ReasonFrozen, Action: actionFreeze, Message: fmt.Sprintf(
		"Froze the guest's %d file systems for a snapshot; they are thawed when it is taken, at the latest in %s", n, timeout)})
	return n, nil
}

// thawGuest thaws the guest's file systems, telling a freeze's end as
// reason (ReasonThawed, ReasonFreezeExpired), with why when it was not
// asked for.
func (r *Runner) thawGuest(ctx context.Context, reason, why string) (int, error) {
	n, err := r.fsfreeze(ctx, "guest-fsfreeze-thaw")
	if err != nil {
		return 0, fmt.Errorf("thawing the guest's file systems: %w", err)
	}
	f := r.freeze
	r.freeze = nil
	if f == nil {
		return n, nil
	}
	f.deadline.Stop()
	held := time.Since(f.since).Round(time.Millisecond)
	r.log.Info("Guest thawed", "fileSystems", n, "frozenFor", held, "why", why)
	msg := fmt.Sprintf("Thawed the guest's %d file systems after %s", n, held)
	if why != "" {
		msg += ": " + why
	}
	r.event(ctx, Event{Warning: reason == ReasonFreezeExpired, Reason: reason, Action: actionThaw, Message: msg})
	return n, nil
}

// freezeExpired thaws a freeze whose timeout ran out.
func (r *Runner) freezeExpired(ctx context.Context) {
	why := fmt.Sprintf("the freeze's timeout (%s) ran out before anyone thawed them: a snapshot taken since then is not consistent", r.freeze.timeout)
	if _, err := r.thawGuest(ctx, ReasonFreezeExpired, why); err != nil {
		// Tried again at the next expiry.
		r.log.Error("Thawing the guest after its freeze's timeout", "err", err)
		r.freeze.deadline = time.NewTimer(time.Second)
	}
}

// fsfreeze runs the agent's freeze or thaw command, within freezeWait,
// and returns the count of file systems it answers.
func (r *Runner) fsfreeze(ctx context.Context, command string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, freezeWait)
	defer cancel()
	var n int
	err := withAgent(ctx, r.machine.GuestAgentSocket, func(c *guestagent.Client) error {
		return c.Do(ctx, command, nil, &n)
	})
	return n, err
}

// FreezeResult is what vm-runner freeze and thaw print.
type FreezeResult struct {
	FileSystems int `json:"fileSystems"`
}

// serveFreeze answers POST /freeze?timeout=DURATION and POST /thaw.
func (r *Runner) serveFreeze(w http.ResponseWriter, req *http.Request) {
	f := freezeRequest{done: make(chan freezeResult, 1)}
	if strings.HasSuffix(req.URL.Path, "/freeze") {
		timeout, err := parseFreezeTimeout(req.URL.Query().Get("timeout"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		f.timeout = timeout
	}
	ctx, cancel := context.WithTimeout(req.Context(), freezeWait+10*time.Second)
	defer cancel()
	res, err := askLoop(ctx, r.freezes, f, f.done)
	switch {
	case errors.Is(err, errLoopBusy):
		http.Error(w, "the runner is busy: try again", http.StatusServiceUnavailable)
	case err != nil:
		http.Error(w, "the runner did not answer in time", http.StatusServiceUnavailable)
	case errors.Is(res.err, ErrNoAgent), errors.Is(res.err, ErrPaused):
		http.Error(w, res.err.Error(), http.StatusConflict)
	case res.err != nil:
		http.Error(w, res.err.Error(), http.StatusInternalServerError)
	default:
		_ = json.NewEncoder(w).Encode(FreezeResult{FileSystems: res.fileSystems})
	}
}

// parseFreezeTimeout reads a freeze's timeout: DefaultFreezeTimeout when
// empty, at most MaxFreezeTimeout.
func parseFreezeTimeout(s string) (time.Duration, error) {
	if s == "" {
		return DefaultFreezeTimeout, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > MaxFreezeTimeout {
		return 0, fmt.Errorf("timeout %q: must be a duration above 0 and at most %s", s, MaxFreezeTimeout)
	}
	return d, nil
}

// Freeze asks the runner of the VM configured in configFile to freeze
// its guest's file systems for at most timeout (vm-runner freeze); Thaw
// (timeout 0) to thaw them.
func Freeze(ctx context.Context, configFile string, timeout time.Duration) (FreezeResult, error) {
	path := "/thaw"
	if timeout > 0 {
		path = "/freeze?timeout=" + url.QueryEscape(timeout.String())
	}
	resp, _, err := askRunner(ctx, configFile, http.MethodPost, path, nil)
	if err != nil {
		return FreezeResult{}, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	switch resp.StatusCode {
	case http.StatusOK:
		var res FreezeResult
		if err := json.Unmarshal(body, &res); err != nil {
			return FreezeResult{}, fmt.Errorf("the runner's answer: %w", err)
		}
		return res, nil
	case http.StatusConflict:
		if said := strings.TrimSpace(string(body)); strings.HasPrefix(said, ErrPaused.Error()) {
			return FreezeResult{}, fmt.Errorf("%w%s", ErrPaused, strings.TrimPrefix(said, ErrPaused.Error()))
		}
		return FreezeResult{}, ErrNoAgent
	}
	return FreezeResult{}, errors.New(strings.TrimSpace(string(body)))
}
