package node

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/test/harness/consolepage"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/headless"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testguest"
)

// countBytes counts, in the page, the bytes its WebSockets carry (the
// SPICE channels' payload, both ways), for the idle figure.
const countBytes = `(() => {
  window.wsBytes = 0;
  const size = (d) => d.byteLength ?? d.size ?? d.length ?? 0;
  const Native = window.WebSocket;
  window.WebSocket = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('message', (e) => { window.wsBytes += size(e.data); });
    }
    send(d) { window.wsBytes += size(d); super.send(d); }
  };
})()`

// browserPage is kubectl vm console --browser with its page open in
// headless chromium.
type browserPage struct {
	cmd    *exec.Cmd
	stderr *syncbuffer.Buffer
	url    string
	tab    context.Context
	close  context.CancelFunc
}

// urlPattern is the page's one-time link: loopback, a free port, the
// page's path, the code.
const urlPattern = `^http://127\.0\.0\.1:\d+/[A-Z2-7]{26}/\?code=[A-Z2-7]{26}$`

// startBrowserConsole runs kubectl vm console --browser with args (the
// user, namespace and VM among them), and env added to its environment.
func startBrowserConsole(t *testing.T, env []string, args ...string) (*browserPage, io.Reader) {
	p := &browserPage{stderr: &syncbuffer.Buffer{}}
	p.cmd = kubectlCmd(context.WithoutCancel(t.Context()), append([]string{"vm", "console", "--browser"}, args...)...)
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = p.stderr
	out, err := p.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	return p, out
}

// openNoLaunch runs kubectl vm console --browser --no-launch with args and
// opens the URL it prints, as a user would, in a new tab of browser, until
// the page is connected and shows the test guest's screen.
func openNoLaunch(t *testing.T, browser context.Context, args ...string) *browserPage {
	p, out := startBrowserConsole(t, nil, append([]string{"--no-launch"}, args...)...)
	defer func() {
		if t.Failed() {
			p.end()
		}
	}()
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "no URL from kubectl vm console --browser --no-launch: %s", p.stderr.String())
	p.url = lines.Text()
	require.Regexp(t, urlPattern, p.url)
	p.tab, p.close = headless.Tab(t, browser)
	_, err := chromedp.Run(p.tab, chromedp.Navigate(p.url))
	require.NoError(t, err)
	consolepage.WaitTestGuest(p.tab, t, time.Minute)
	consolepage.WaitState(p.tab, t, "connected", time.Minute)
	return p
}

// browserConsole opens the display of the running test guest (booted with
// testguest.Screen) in a real browser as a user with the vm-user role's
// rights, as a desktop's browser would get it ($BROWSER): the canvas shows
// the guest's known screen; keys typed in the page, its Ctrl-Alt-Del
// button and a click on the display reach the guest. A second console,
// with --no-launch, takes the display over and the first page says so; a
// reload of the first page, which kept its session, is refused with its
// replaced password and says so; Ctrl-C ends the first command. The second
// page stays open for the caller, who ends it.
func browserConsole(t *testing.T, browser context.Context, ns, vm string) *browserPage {
	kubectl(t, "", "create", "serviceaccount", "-n", ns, "viewer")
	kubectl(t, "", "create", "rolebinding", "viewer", "-n", ns, "--clusterrole", install.UserClusterRole, "--serviceaccount", ns+":viewer")

	// $BROWSER hands the URL to the test's chromium.
	dir := t.TempDir()
	urlFile := filepath.Join(dir, "url")
	script := filepath.Join(dir, "browser")
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\nprintf '%s\\n' \"$1\" >"+urlFile+".new && mv "+urlFile+".new "+urlFile+"\n"), 0o755))

	const expiry = 20 * time.Second
	start := time.Now()
	asViewer := []string{"--as", "system:serviceaccount:" + ns + ":viewer", "-n", ns, vm}
	p, _ := startBrowserConsole(t, []string{"BROWSER=" + script}, append(asViewer, "--expiry", expiry.String())...)
	defer func() {
		if t.Failed() {
			p.end()
		}
	}()
	eventually.Within(t, time.Minute, func() string {
		b, err := os.ReadFile(urlFile)
		if err != nil {
			return fmt.Sprintf("$BROWSER was not run (%v); kubectl vm console --browser says:\n%s", err, p.stderr.String())
		}
		p.url = strings.TrimSpace(string(b))
		return ""
	})
	require.Regexp(t, urlPattern, p.url)
	t.Logf("kubectl vm console --browser: $BROWSER %s (%v)\n%s", p.url, time.Since(start).Round(time.Millisecond), p.stderr.String())

	p.tab, p.close = headless.Tab(t, browser)
	_, err := chromedp.Call(p.tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: countBytes})
	require.NoError(t, err)
	_, err = chromedp.Run(p.tab, chromedp.Navigate(p.url))
	require.NoError(t, err)
	screen := consolepage.WaitTestGuest(p.tab, t, 2*time.Minute)
	t.Logf("command to the guest's screen in the page: %v (canvas %dx%d, %.0f%% blue)",
		time.Since(start).Round(time.Millisecond), screen.Width, screen.Height, 100*screen.Blue)

	consolepage.WaitState(p.tab, t, "connected", time.Minute)
	require.NoError(t, consolepage.Type(p.tab, "hello browser\r"))
	require.Equal(t, testguest.KeysPrefix+"hello browser", waitConsole(t, ns, vm, testguest.KeysPrefix, time.Minute))
	_, err = chromedp.Run(p.tab, chromedp.Click("#ctrl-alt-del"))
	require.NoError(t, err)
	waitConsole(t, ns, vm, testguest.CtrlAltDelLine, time.Minute)
	_, err = chromedp.Run(p.tab, chromedp.Click("#spice-screen canvas"))
	require.NoError(t, err)
	waitConsole(t, ns, vm, testguest.MouseLine, time.Minute)
	headless.Screenshot(p.tab, t, "browser-console.png") // with what was typed

	// An idle console: the guest's screen stays as it is but for its
	// blinking cursor.
	const idle = 10 * time.Second
	before, err := chromedp.Run(p.tab, chromedp.Evaluate[int64]("window.wsBytes"))
	require.NoError(t, err)
	time.Sleep(idle)
	after, err := chromedp.Run(p.tab, chromedp.Evaluate[int64]("window.wsBytes"))
	require.NoError(t, err)
	t.Logf("an idle browser console: %d bytes/s of SPICE over its WebSockets", (after-before)/int64(idle/time.Second))

	// With --no-launch the user opens the URL: this page takes the display
	// over (SPICE serves one client), and the first page says it lost it.
	q := openNoLaunch(t, browser, asViewer...)
	defer func() {
		if t.Failed() {
			q.end()
		}
	}()
	require.NotEqual(t, p.url, q.url, "a new token")
	msg := consolepage.WaitState(p.tab, t, "dropped", time.Minute)
	require.Contains(t, msg, "another console may have taken it over")

	// The second console replaced the first one's password.
	t.Run("spent password refused", func(t *testing.T) {
		_, err := chromedp.Run(p.tab, chromedp.Reload())
		require.NoError(t, err)
		msg := consolepage.WaitState(p.tab, t, "refused", time.Minute)
		require.Contains(t, msg, "The VM's display refused the password")
		require.Contains(t, msg, "this one is spent")
		require.Contains(t, msg, "run: kubectl vm console --browser -n "+ns+" "+vm)
		headless.Screenshot(p.tab, t, "browser-refused.png")
		// The second page is still connected.
		state, _, err := consolepage.State(q.tab)
		require.NoError(t, err)
		require.Equal(t, "connected", state)
	})

	// Ctrl-C ends the first command; its page says so.
	require.NoError(t, p.cmd.Process.Signal(os.Interrupt))
	require.NoError(t, p.cmd.Wait(), "Ctrl-C: %s", p.stderr.String())
	const ended = "kubectl vm console has ended: this page no longer reaches the VM."
	eventually.Within(t, time.Minute, func() string {
		if _, msg, err := consolepage.State(p.tab); err != nil || !strings.Contains(msg, ended) {
			return fmt.Sprintf("the first page does not say the command ended: %q (%v)", msg, err)
		}
		return ""
	})
	p.close()
	return q
}

// end closes the page and kills the command.
func (p *browserPage) end() {
	if p.close != nil {
		p.close()
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// stopped checks that the page says the VM stopped, then closes the page:
// the command ends.
func (p *browserPage) stopped(t *testing.T, ns, vm string) {
	msg := consolepage.WaitState(p.tab, t, "stopped", time.Minute)
	require.Contains(t, msg, "The VM "+ns+"/"+vm+" stopped. Start it with: kubectl vm start -n "+ns+" "+vm)
	headless.Screenshot(p.tab, t, "browser-stopped.png")
	p.close()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, p.stderr.String())
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Signal(os.Interrupt)
		t.Fatalf("kubectl vm console --browser did not end when its page closed:\n%s", p.stderr.String())
	}
	require.Contains(t, p.stderr.String(), "The page was closed")
	t.Logf("kubectl vm console --browser, the VM stopped:\n%s", p.stderr.String())
	require.Contains(t, p.stderr.String(), "stopped")
}

// gitopsBrowserConsole opens the display of a rendered VM (no
// VirtualMachine, so no status confirms the new password) in the browser:
// the page shows the guest's screen, and closing it ends the command.
func gitopsBrowserConsole(t *testing.T, ns, vm string) {
	p := openNoLaunch(t, headless.Start(t), "-n", ns, vm)
	p.close()
	require.NoError(t, p.cmd.Wait(), p.stderr.String())
	require.Contains(t, p.stderr.String(), "The page was closed")
	require.NotRegexp(t, `(?m)^E\d{4} `, p.stderr.String(), "client-go's error log")
	t.Logf("kubectl vm console --browser in GitOps mode:\n%s", p.stderr.String())
}
