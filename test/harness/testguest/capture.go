package testguest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/syncbuffer"
)

// Capture runs tcpdump on interface iface, behind prefix (a command that
// enters a network namespace: ip netns exec, nsenter), with more tcpdump
// args (a direction, a filter), until the returned stop, which returns
// what it printed: a line per packet, numeric, with the link-level
// header and no time, such as
//
//	52:54:00:12:34:56 > 02:00:00:00:00:01, ethertype IPv4 (0x0800), length 42: 10.0.2.15.40000 > 10.99.0.1.9: UDP, length 0
//
// It returns once tcpdump listens, so that it sees what is sent next.
// Tests of what a guest sends use it to see what leaves its tap.
func Capture(t testing.TB, prefix []string, iface string, args ...string) (stop func() string) {
	t.Helper()
	prereq.Commands(t, "tcpdump", "tcpdump")
	// -l: a line per packet as it comes; -Z root: no user of tcpdump's
	// own needed where it runs.
	cmd := append(append(append([]string{}, prefix...), "tcpdump", "-i", iface, "-n", "-t", "-e", "-l", "-Z", "root"), args...)
	c := exec.Command(cmd[0], cmd[1:]...)
	var out, said syncbuffer.Buffer
	c.Stdout, c.Stderr = &out, &said
	if err := c.Start(); err != nil {
		t.Fatalf("%s: %v", strings.Join(cmd, " "), err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	t.Cleanup(func() { _ = c.Process.Kill() })
	eventually.Within(t, 30*time.Second, func() string {
		if strings.Contains(said.String(), "listening on ") {
			return ""
		}
		return fmt.Sprintf("%s does not listen yet: %s", strings.Join(cmd, " "), said.String())
	})
	return func() string {
		t.Helper()
		// On SIGINT tcpdump prints what it has and ends.
		_ = c.Process.Signal(os.Interrupt)
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(cmd, " "), err, said.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not end on SIGINT", strings.Join(cmd, " "))
		}
		return out.String()
	}
}
