// Package consolepage reads the page of kubectl vm console --browser in a
// browser driven by chromedp: its state (body[data-state]), its message,
// and what its canvas shows.
package consolepage

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/vmop/vmop/test/harness/eventually"
)

// Screen is a summary of the SPICE canvas's pixels.
type Screen struct {
	Width, Height int
	// Blue and White are the shares of the canvas in VGA blue and bright
	// white; WhiteTop the bright white pixels of the first text row.
	Blue, White float64
	WhiteTop    int
}

// readScreen sums the canvas's pixels in the page.
const readScreen = `(() => {
  const c = document.querySelector('#spice-screen canvas');
  if (!c || !c.width) return {Width: 0, Height: 0, Blue: 0, White: 0, WhiteTop: 0};
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let blue = 0, white = 0, top = 0;
  for (let i = 0; i < d.length; i += 4) {
    const [r, g, b] = [d[i], d[i + 1], d[i + 2]];
    if (r < 40 && g < 40 && b > 140 && b < 200) blue++;
    if (r > 220 && g > 220 && b > 220) {
      white++;
      if (i / 4 < c.width * 16) top++;
    }
  }
  const n = d.length / 4;
  return {Width: c.width, Height: c.height, Blue: blue / n, White: white / n, WhiteTop: top};
})()`

// Read returns what the canvas shows now.
func Read(ctx context.Context) (Screen, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[Screen](readScreen))
}

// ShowsTestGuest tells whether the screen is the test guest's known one
// (testguest.Screen): white on blue, its line of text at the top.
func (s Screen) ShowsTestGuest() error {
	if s.Width == 0 {
		return fmt.Errorf("no canvas yet")
	}
	if s.Blue < 0.6 || s.WhiteTop < 50 || s.White > 0.1 {
		return fmt.Errorf("the canvas (%dx%d) is not the test guest's screen: %.0f%% blue, %.1f%% white, %d white pixels in the first text row",
			s.Width, s.Height, 100*s.Blue, 100*s.White, s.WhiteTop)
	}
	return nil
}

// WaitTestGuest waits until the canvas shows the test guest's screen.
func WaitTestGuest(ctx context.Context, t testing.TB, within time.Duration) Screen {
	t.Helper()
	var s Screen
	eventually.Within(t, within, func() string {
		var err error
		if s, err = Read(ctx); err != nil {
			return err.Error()
		}
		if err := s.ShowsTestGuest(); err != nil {
			return fmt.Sprintf("%v; the page: %s", err, describe(ctx))
		}
		return ""
	})
	return s
}

// State returns the page's state and message.
func State(ctx context.Context) (state, message string, err error) {
	s, err := chromedp.Run(ctx, chromedp.Evaluate[[2]string](
		`[document.body.dataset.state, document.getElementById('message').textContent]`))
	return s[0], s[1], err
}

// WaitState waits until the page is in state and returns its message.
func WaitState(ctx context.Context, t testing.TB, state string, within time.Duration) string {
	t.Helper()
	var msg string
	eventually.Within(t, within, func() string {
		got, m, err := State(ctx)
		if err != nil {
			return err.Error()
		}
		msg = m
		if got != state {
			return fmt.Sprintf("the page is %q, want %q; its message: %q", got, state, m)
		}
		return ""
	})
	return msg
}

func describe(ctx context.Context) string {
	state, msg, err := State(ctx)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("state %q, message %q", state, msg)
}

// Type types text on the display, a key every 50 ms as a person does: a
// burst outruns the PS/2 keyboard's 16-byte queue in qemu while an
// emulated (TCG) guest is slow to read it, and qemu drops what overflows.
func Type(ctx context.Context, text string) error {
	if _, err := chromedp.Run(ctx, chromedp.Focus("#spice-screen canvas")); err != nil {
		return err
	}
	for _, r := range text {
		if _, err := chromedp.Run(ctx, chromedp.KeyEvent(string(r))); err != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}
