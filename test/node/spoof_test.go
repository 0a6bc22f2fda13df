package node

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/podnet"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// spoofing: the test guest on its pod's network poses as another pod (an
// address of the node's pod subnet), as another MAC, and sends IPv6. A
// capture on the pod's eth0 (from the node, in the pod's network
// namespace) sees none of it leave, and the guest's own pings before and
// after leave with the pod's IP; a capture on its tap sees that it did
// pose, and that the pod did not answer its IPv6.
func spoofing(t *testing.T, ns, vm, podIP string) {
	pid, err := runnerPID(t.Context(), ns, vm)
	require.NoError(t, err)
	netns := []string{"nsenter", "--net=/proc/" + strconv.Itoa(pid) + "/ns/net"}
	left := testguest.Capture(t, netns, "eth0", "-Q", "out", "icmp")
	sent := testguest.Capture(t, netns, podnet.Tap, "icmp or icmp6")
	// No pod has .250 in the node's subnet; the node answers pings.
	s := testguest.Spoofing{IP: "10.99.0.250", MAC: "52:54:00:99:00:fa", Dst: testnode.IP}
	_, errOut, err := kubectlResult(t.Context(), s.Line()+"\r", "vm", "console", "--serial", "-n", ns, vm)
	require.NoError(t, err, errOut)
	waitConsole(t, ns, vm, testguest.SpoofedLine, 2*time.Minute)
	s.Check(t, podIP, sent(), left())
	// And the guest is still reached as before.
	echo(t, podIP+":7", "hello after posing\n")
}
