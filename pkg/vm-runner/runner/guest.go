package runner

import (
	"context"
	"time"

	"github.com/vmop/vmop/pkg/vm-runner/guestagent"
)

const (
	// guestPoll is how often the runner asks the agent again: addresses
	// come and go (DHCP, a user's changes) without an event.
	guestPoll = 15 * time.Second
	// guestRetry is the wait after an agent that did not answer (it opens
	// its port before it serves).
	guestRetry = 2 * time.Second
	// agentStopTimeout bounds asking the agent to shut down before ACPI.
	agentStopTimeout = 3 * time.Second
)

// guestWatch asks the guest agent what it knows while its port is open and
// hands the answers to the loop, which alone writes the status.
type guestWatch struct {
	answers chan guestAnswer
	cancel  context.CancelFunc
}

// guestAnswer is what one poll got from an agent that answered: all it
// knows (told), or less (an agent that does not serve every command).
type guestAnswer struct {
	info guestagent.Info
	told bool
}

func newGuestWatch() *guestWatch {
	return &guestWatch{answers: make(chan guestAnswer), cancel: func() {}}
}

// start begins polling the agent at socket (again).
func (w *guestWatch) start(ctx context.Context, r *Runner) {
	w.cancel()
	ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		for {
			wait := guestPoll
			info, answered, err := queryGuest(ctx, r.machine.GuestAgentSocket)
			if err != nil {
				r.log.Debug("Asking the guest agent", "err", err)
				wait = guestRetry
			}
			if answered {
				select {
				case w.answers <- guestAnswer{info: info, told: err == nil}:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return
			}
		}
	}()
}

func (w *guestWatch) stop() { w.cancel() }

// queryGuest asks the agent what it knows, within one DefaultTimeout for
// the whole exchange: the socket is the agent's only one. answered tells
// that the agent took part (it synchronised), even when err says that it
// did not tell everything.
func queryGuest(ctx context.Context, socket string) (info guestagent.Info, answered bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, guestagent.DefaultTimeout)
	defer cancel()
	err = withAgent(ctx, socket, func(c *guestagent.Client) error {
		answered = true
		info, err = c.Info(ctx)
		return err
	})
	return info, answered, err
}

// agentShutdown asks the guest agent to power the guest off; an error
// means it did not answer.
func agentShutdown(ctx context.Context, socket string) error {
	ctx, cancel := context.WithTimeout(ctx, agentStopTimeout)
	defer cancel()
	return withAgent(ctx, socket, func(c *guestagent.Client) error { return c.Shutdown(ctx) })
}

// withAgent runs do with a connection of its own to the guest agent: the
// agent's socket serves one client at a time.
func withAgent(ctx context.Context, socket string, do func(*guestagent.Client) error) error {
	c, err := guestagent.Dial(ctx, socket)
	if err != nil {
		return err
	}
	defer c.Close()
	return do(c)
}
