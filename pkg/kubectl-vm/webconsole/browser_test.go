package webconsole_test

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/kubectl-vm/webconsole"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/test/harness/consolepage"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/headless"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testguest"
)

// guest runs the test guest with its known screen under qemu, with a
// SPICE display on 127.0.0.1 that takes password; the serial console goes
// to serial. exited is closed when qemu exits.
type guest struct {
	spice  string
	serial *syncbuffer.Buffer
	cmd    *exec.Cmd
	exited chan struct{}
	qmp    *qmp.Monitor
}

func startGuest(t *testing.T, password string) *guest {
	t.Helper()
	g := testguest.Build(t).WithAppend(testguest.Screen)
	// The bzImage: booted through the PVH entry, the kernel gets no VGA
	// text console.
	g.Kernel = g.BzImage
	port := freeport.Get(t)
	qmpSocket := filepath.Join(t.TempDir(), "qmp.sock")
	args := append([]string{
		"-qmp", "unix:" + qmpSocket + ",server=on,wait=off",
		"-nodefaults", "-display", "none", "-machine", "q35,accel=tcg", "-m", "256",
		// The display and pointer of vmop's qemu template.
		"-device", "virtio-vga", "-device", "qemu-xhci", "-device", "usb-tablet", "-serial", "stdio",
		"-object", "secret,id=spicepw,data=" + password,
		"-spice", fmt.Sprintf("port=%d,addr=127.0.0.1,password-secret=spicepw", port),
	}, g.QemuArgs()...)
	cmd := exec.Command("qemu-system-x86_64", args...)
	serial := &syncbuffer.Buffer{}
	cmd.Stdout, cmd.Stderr = serial, serial
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	gu := &guest{spice: fmt.Sprintf("127.0.0.1:%d", port), serial: serial, cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(gu.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-gu.exited
		if t.Failed() {
			t.Logf("guest's serial console:\n%s", serial.String())
		}
	})
	gu.waitSerial(t, testguest.ReadyLine, 2*time.Minute)
	var err error
	gu.qmp, err = qmp.Dial(t.Context(), qmpSocket)
	require.NoError(t, err)
	t.Cleanup(func() { _ = gu.qmp.Close() })
	return gu
}

func (g *guest) waitSerial(t *testing.T, line string, within time.Duration) {
	t.Helper()
	eventually.Within(t, within, func() string {
		if strings.Contains(g.serial.String(), line) {
			return ""
		}
		return fmt.Sprintf("no %q on the guest's serial console", line)
	})
}

// console is a page's session: its password, whether the password is not
// yet confirmed, and where the display's connections go when set.
type console struct {
	password string
	pending  bool
	conns    chan<- net.Conn
}

// serve runs a console server for the guest until the test ends and
// returns its link.
func serve(t *testing.T, g *guest, c console) string {
	t.Helper()
	password, conns := c.password, c.conns
	s, err := webconsole.New(webconsole.Config{
		Session: webconsole.Session{Namespace: "ns", VM: "guest", Password: password, Expiry: 30, Pending: c.pending,
			Command: "kubectl vm console --browser -n ns guest", Client: "spice-html5 0.2.1"},
		Dial: func(ctx context.Context) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", g.spice)
			if err == nil && conns != nil {
				conns <- c
			}
			return c, err
		},
		Why: func(context.Context) *webconsole.Notice {
			select {
			case <-g.exited:
				return &webconsole.Notice{Kind: "stopped", Message: "The VM ns/guest stopped."}
			case <-time.After(5 * time.Second):
				return nil
			}
		},
	})
	require.NoError(t, err)
	url, err := s.Listen(t.Context())
	require.NoError(t, err)
	return url
}

// TestBrowser drives the page in headless chromium against a real qemu:
// it shows the guest's screen, types to it, and says why it ended.
func TestBrowser(t *testing.T) {
	const password = "one-time"
	g := startGuest(t, password)
	browser := headless.Start(t)
	ctx, _ := headless.Tab(t, browser)
	url := serve(t, g, console{password: password})

	start := time.Now()
	_, err := chromedp.Run(ctx, chromedp.Navigate(url))
	require.NoError(t, err)
	consolepage.WaitTestGuest(ctx, t, time.Minute)
	t.Logf("page to the guest's screen: %v", time.Since(start).Round(time.Millisecond))

	consolepage.WaitState(ctx, t, "connected", time.Minute)
	require.NoError(t, consolepage.Type(ctx, "hello\r"))
	g.waitSerial(t, testguest.KeysPrefix+"hello", time.Minute)
	_, err = chromedp.Run(ctx, chromedp.Click("#ctrl-alt-del"))
	require.NoError(t, err)
	g.waitSerial(t, testguest.CtrlAltDelLine, time.Minute)
	_, err = chromedp.Run(ctx, chromedp.Click("#spice-screen canvas"))
	require.NoError(t, err)
	g.waitSerial(t, testguest.MouseLine, time.Minute)
	headless.Screenshot(ctx, t, "console.png")

	// A reload connects again: the tab kept the session.
	_, err = chromedp.Run(ctx, chromedp.Reload())
	require.NoError(t, err)
	consolepage.WaitTestGuest(ctx, t, time.Minute)
	consolepage.WaitState(ctx, t, "connected", time.Minute)

	// The password goes to one page: the link opened again, in another
	// tab of the browser (the link's first, which has the cookie), says
	// what to do, and the first page stays.
	t.Run("given once", func(t *testing.T) {
		tab, cancel := headless.Tab(t, browser)
		defer cancel()
		_, err := chromedp.Run(tab, chromedp.Navigate(url))
		require.NoError(t, err)
		msg := consolepage.WaitState(tab, t, "taken", time.Minute)
		require.Contains(t, msg, "kubectl vm console already gave its one-time password to a page")
		require.Contains(t, msg, "run: kubectl vm console --browser -n ns guest")
		headless.Screenshot(tab, t, "taken.png")
		state, _, err := consolepage.State(ctx)
		require.NoError(t, err)
		require.Equal(t, "connected", state)
	})

	t.Run("wrong password", func(t *testing.T) {
		tab, cancel := headless.Tab(t, browser)
		defer cancel()
		_, err := chromedp.Run(tab, chromedp.Navigate(serve(t, g, console{password: "wrong"})))
		require.NoError(t, err)
		msg := consolepage.WaitState(tab, t, "refused", time.Minute)
		require.Contains(t, msg, "The VM's display refused the password")
		require.Contains(t, msg, "run: kubectl vm console --browser -n ns guest")
	})

	// In GitOps mode nothing confirms that the VM took the password:
	// the page tries it again for a moment.
	t.Run("pending password", func(t *testing.T) {
		tab, cancel := headless.Tab(t, browser)
		defer cancel()
		_, err := chromedp.Run(tab, chromedp.Navigate(serve(t, g, console{password: "later", pending: true})))
		require.NoError(t, err)
		time.Sleep(2 * time.Second) // refused, tried again
		state, _, err := consolepage.State(tab)
		require.NoError(t, err)
		require.Equal(t, "connecting", state)
		require.NoError(t, g.qmp.SetPassword(t.Context(), "spice", "later", "keep"))
		consolepage.WaitState(tab, t, "connected", time.Minute)
		require.NoError(t, g.qmp.SetPassword(t.Context(), "spice", password, "keep"))
	})

	t.Run("connection drops", func(t *testing.T) {
		conns := make(chan net.Conn, 16)
		tab, cancel := headless.Tab(t, browser)
		defer cancel()
		_, err := chromedp.Run(tab, chromedp.Navigate(serve(t, g, console{password: password, conns: conns})))
		require.NoError(t, err)
		consolepage.WaitState(tab, t, "connected", time.Minute)
		for len(conns) > 0 {
			_ = (<-conns).Close()
		}
		msg := consolepage.WaitState(tab, t, "dropped", time.Minute)
		require.Contains(t, msg, "The connection to the VM's display ended")
		require.Contains(t, msg, "run: kubectl vm console --browser -n ns guest")
	})

	// A module the browser cannot load (a proxy, an extension) would
	// leave the page at "Loading…": it says what failed.
	t.Run("module not loaded", func(t *testing.T) {
		tab, cancel := headless.Tab(t, browser)
		defer cancel()
		_, err := chromedp.Call(tab, network.SetBlockedURLs, network.SetBlockedURLsParams{URLPatterns: []*network.BlockPattern{
			{URLPattern: "*://*:*/*/spice-html5/src/display.js", Block: true}}})
		require.NoError(t, err)
		_, err = chromedp.Run(tab, chromedp.Navigate(serve(t, g, console{password: password})))
		require.NoError(t, err)
		msg := consolepage.WaitState(tab, t, "failed", time.Minute)
		require.Contains(t, msg, "The page could not start (http://127.0.0.1:")
		require.Contains(t, msg, "/console.js or a module it imports did not load). Reload it")
	})

	// The VM stops: the page says so. First connected again: a subtest's
	// tab may have taken the display over (it serves one client at a
	// time; seen once), and a page already disconnected hears of no stop.
	reloadConnected(ctx, t)
	require.NoError(t, g.cmd.Process.Kill())
	msg := consolepage.WaitState(ctx, t, "stopped", time.Minute)
	require.Contains(t, msg, "The VM ns/guest stopped.")
	headless.Screenshot(ctx, t, "stopped.png")
}

// reloadConnected reloads the page until it is connected, at most three
// times: in make test, test/node makes and removes network interfaces
// beside this test, and Chromium then aborts the loads in flight
// (net::ERR_NETWORK_CHANGED, seen once), so that the page says, as it
// should, that a module did not load.
func reloadConnected(ctx context.Context, t *testing.T) {
	t.Helper()
	for try := 1; ; try++ {
		_, err := chromedp.Run(ctx, chromedp.Reload())
		require.NoError(t, err)
		var state, msg string
		eventually.Within(t, time.Minute, func() string {
			var err error
			if state, msg, err = consolepage.State(ctx); err != nil {
				return err.Error()
			}
			if state != "connected" && state != "failed" {
				return fmt.Sprintf("the page is %q, want connected; its message: %q", state, msg)
			}
			return ""
		})
		if state == "connected" {
			return
		}
		if try == 3 {
			t.Fatalf("the page failed at each of %d reloads: %s", try, msg)
		}
		t.Logf("reload %d: the page failed (%s); again", try, msg)
	}
}
