package testguest

import (
	"regexp"
	"strconv"
	"testing"
)

// Spoofing is what the guest's serial console line Line makes it do on
// its network: ping Dst as itself, then pose as others (from address IP,
// from MAC MAC, with IPv6 to every node of its link), then ping Dst as
// itself again; it prints SpoofedLine when done. Each ping has a size of
// its own, so that a capture tells them apart.
type Spoofing struct {
	IP, MAC string // whom the guest poses as
	Dst     string // an IPv4 address beyond the guest's router
}

// SpoofedLine is printed when the guest has done a Spoofing.
const SpoofedLine = "TESTGUEST SPOOFED"

// Ping data sizes of a Spoofing, as init.sh sends them.
const (
	ownSize      = 100
	spoofIPSize  = 101
	spoofMACSize = 102
	ownAfterSize = 104
)

// Line is the line to type on the guest's serial console.
func (s Spoofing) Line() string { return "spoof " + s.IP + " " + s.Dst + " " + s.MAC }

// Check fails t unless captures (Capture) show the guest's posing
// stopped at its pod: sent, on the guest's tap in both directions, has
// each of its pings (so the guest did pose) and no answer to its IPv6;
// left, on the pod's interface going out (ICMP), has its own pings
// before and after, from podIP (masqueraded), and none of the others.
func (s Spoofing) Check(t testing.TB, podIP, sent, left string) {
	t.Helper()
	// tcpdump -e -n -t: "MAC > MAC, ethertype IPv4 (0x0800), length N: SRC > DST: ICMP echo request, id I, seq S, length ICMP"
	// from is a pattern.
	ping := func(from string, size int) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^.*: ` + from + ` > ` + regexp.QuoteMeta(s.Dst) +
			`: ICMP echo request, id \d+, seq \d+, length ` + strconv.Itoa(size+8) + `$`)
	}
	anyone := `\S+`
	want := func(capture, what string, re *regexp.Regexp, found bool) {
		t.Helper()
		if re.MatchString(capture) != found {
			t.Errorf("%s: want %v, the capture has %v of %s:\n%s", what, found, !found, re, capture)
		}
	}
	want(sent, "the guest's ping from "+s.IP, ping(regexp.QuoteMeta(s.IP), spoofIPSize), true)
	want(sent, "the guest's ping from "+s.MAC, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(s.MAC)+` > .*length `+strconv.Itoa(spoofMACSize+8)+`$`), true)
	want(sent, "the guest's IPv6 ping", regexp.MustCompile(`ICMP6, echo request`), true)
	want(sent, "an answer to the guest's IPv6", regexp.MustCompile(`ICMP6, echo reply`), false)

	want(left, "the guest's own ping, masqueraded", ping(regexp.QuoteMeta(podIP), ownSize), true)
	want(left, "the guest's own ping after posing, masqueraded", ping(regexp.QuoteMeta(podIP), ownAfterSize), true)
	want(left, "the guest's ping from "+s.IP, ping(anyone, spoofIPSize), false)
	want(left, "the guest's ping from "+s.MAC, ping(anyone, spoofMACSize), false)
	want(left, "anything from "+s.IP, regexp.MustCompile(`: `+regexp.QuoteMeta(s.IP)+` > `), false)
	if t.Failed() {
		t.Logf("what the guest sent into its tap, and the pod's answers:\n%s\nwhat left the pod:\n%s", sent, left)
	}
}
