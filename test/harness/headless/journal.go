package headless

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Tab opens a new tab of browser (a context from Start); cancel closes
// it, as does the end of Start's test. What the tab's pages do (their
// requests and how each ended, console messages, uncaught exceptions, the
// browser's own log) is logged when Start's test fails: a page stuck in
// the browser says why only there.
func Tab(t testing.TB, browser context.Context) (ctx context.Context, cancel context.CancelFunc) {
	t.Helper()
	tabs, ok := browser.Value(tabsKey{}).(*tabs)
	if !ok {
		t.Fatal("headless.Tab: the context is not one from headless.Start")
	}
	ctx, cancel = chromedp.NewContext(browser)
	j := &journal{start: time.Now(), urls: map[network.RequestID]string{}}
	if err := chromedp.Listen(ctx, j.event); err != nil {
		cancel()
		t.Fatalf("open a tab: %v", err)
	}
	tabs.add(j)
	return ctx, cancel
}

type tabsKey struct{}

// tabs are the journals of a browser's tabs.
type tabs struct {
	mu       sync.Mutex
	journals []*journal
}

func (ts *tabs) add(j *journal) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.journals = append(ts.journals, j)
}

func (ts *tabs) log(t testing.TB) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for i, j := range ts.journals {
		t.Logf("what the browser's tab %d did:\n%s", i+1, j.String())
	}
}

type journal struct {
	start time.Time
	mu    sync.Mutex
	urls  map[network.RequestID]string
	lines []string
}

// event runs in chromedp's loop: it only notes.
func (j *journal) event(ev any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch ev := ev.(type) {
	case *network.EventRequestWillBeSent:
		j.urls[ev.RequestID] = ev.Request.URL
		j.add("request %s %s", ev.Request.Method, ev.Request.URL)
	case *network.EventResponseReceived:
		j.add("response %d %s (%s)", ev.Response.Status, j.urls[ev.RequestID], ev.Response.MimeType)
	case *network.EventLoadingFailed:
		j.add("failed %s: %s%s", j.urls[ev.RequestID], ev.ErrorText, blocked(ev))
	case *runtime.EventConsoleAPICalled:
		args := make([]string, 0, len(ev.Args))
		for _, a := range ev.Args {
			if len(a.Value) > 0 {
				args = append(args, string(a.Value))
			} else {
				args = append(args, a.Description)
			}
		}
		j.add("console.%s %s", ev.Type, strings.Join(args, " "))
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		text := d.Text
		if d.Exception != nil {
			text += " " + d.Exception.Description
		}
		j.add("exception %s (%s:%d)", text, d.URL, d.LineNumber)
	case *log.EventEntryAdded:
		j.add("log %s %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL)
	}
}

func blocked(ev *network.EventLoadingFailed) string {
	if ev.BlockedReason != "" {
		return " (blocked: " + string(ev.BlockedReason) + ")"
	}
	if ev.Canceled {
		return " (canceled)"
	}
	return ""
}

func (j *journal) add(format string, args ...any) {
	j.lines = append(j.lines, fmt.Sprintf("%8.3fs ", time.Since(j.start).Seconds())+fmt.Sprintf(format, args...))
}

func (j *journal) String() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return strings.Join(j.lines, "\n")
}
