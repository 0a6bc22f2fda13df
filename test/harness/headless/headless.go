// Package headless runs Debian's chromium without a screen for browser
// tests, driven over the DevTools protocol with chromedp. The flags keep
// it off the network but for the pages a test opens: this machine's
// network is closed, and chromium would otherwise call home at start.
package headless

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/vmop/vmop/test/harness/artifact"
	"github.com/vmop/vmop/test/harness/prereq"
)

// Chromium is Debian's chromium (package chromium).
const Chromium = "/usr/bin/chromium"

// Start runs chromium headless until the test ends and returns a context
// of its first tab, from which Tab opens the tests' pages. When the test
// fails, what each of those tabs did is logged.
func Start(t testing.TB) context.Context {
	t.Helper()
	prereq.Files(t, "chromium", Chromium)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(Chromium),
		chromedp.NoSandbox, // as root; the page is the test's own
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(filepath.Join(t.TempDir(), "chromium")),
		chromedp.WindowSize(1280, 900),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc, chromedp.WithLogf(t.Logf))
	tabs := &tabs{}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		if t.Failed() {
			tabs.log(t)
		}
	})
	// The first Run starts the browser.
	if _, err := chromedp.Run(ctx, chromedp.Steps()); err != nil {
		t.Fatalf("start %s: %v", Chromium, err)
	}
	return context.WithValue(ctx, tabsKey{}, tabs)
}

// Screenshot keeps a PNG of the tab's page as name among the test's
// artifacts.
func Screenshot(ctx context.Context, t testing.TB, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	artifact.Save(t, name, png)
}
