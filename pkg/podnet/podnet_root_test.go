package podnet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/vm-runner/dhcp"
	"github.com/vmop/vmop/test/harness/prereq"
)

// helperEnv makes the test binary run Setup (in the network namespace it
// was started in) instead of the tests, and print the Network as JSON;
// with serveEnv (a MAC) it then serves that guest DHCP, as the runner
// does, until its stdin closes.
const (
	helperEnv = "VMOP_PODNET_SETUP"
	serveEnv  = "VMOP_PODNET_SERVE"
)

func TestMain(m *testing.M) {
	if opts := os.Getenv(helperEnv); opts != "" {
		os.Exit(helper(opts, os.Getenv(serveEnv)))
	}
	os.Exit(m.Run())
}

func helper(opts, mac string) int {
	var o Options
	if err := json.Unmarshal([]byte(opts), &o); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	n, err := Setup(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if mac == "" {
		_ = json.NewEncoder(os.Stdout).Encode(n)
		return 0
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := dhcp.Listen(ctx, Tap, dhcp.Lease{MAC: hw, Addr: n.Guest, Router: n.Gateway, Hostname: "bench", MTU: n.MTU, Duration: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	_ = json.NewEncoder(os.Stdout).Encode(n)
	if err := srv.Serve(ctx, slog.New(slog.NewTextHandler(os.Stderr, nil))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// pod is a network namespace with a veth pair to the test's, as a CNI
// bridge plugin would give a pod: eth0 with an address and a default route.
type pod struct {
	ns   string
	host string // the node's end of the veth pair
}

func newPod(t testing.TB) *pod {
	t.Helper()
	prereq.Root(t, "makes network namespaces")
	prereq.Commands(t, "iproute2", "ip")
	id := os.Getpid() % 10000
	p := &pod{ns: fmt.Sprintf("vmop-podnet-%d", id), host: fmt.Sprintf("vpn%dh", id)}
	host := p.host
	run(t, "ip", "netns", "add", p.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", p.ns).Run() })
	run(t, "ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", p.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", host).Run() })
	// The node's side: the pod's router, and the host's route to the pod.
	run(t, "ip", "addr", "add", "10.98.7.1/24", "dev", host)
	run(t, "ip", "link", "set", host, "up")
	run(t, "ip", "netns", "exec", p.ns, "ip", "link", "set", "eth0", "mtu", "1450", "up")
	run(t, "ip", "netns", "exec", p.ns, "ip", "addr", "add", "10.98.7.2/24", "dev", "eth0")
	run(t, "ip", "netns", "exec", p.ns, "ip", "route", "add", "default", "via", "10.98.7.1")
	return p
}

// setup runs Setup in the pod's namespace.
func (p *pod) setup(t testing.TB, o Options) (*Network, error) {
	t.Helper()
	opts, err := json.Marshal(o)
	require.NoError(t, err)
	cmd := exec.Command("ip", "netns", "exec", p.ns, os.Args[0])
	cmd.Env = append(os.Environ(), helperEnv+"="+string(opts))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	var n Network
	require.NoError(t, json.Unmarshal(out, &n))
	return &n, nil
}

func (p *pod) run(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, append([]string{"ip", "netns", "exec", p.ns}, args...)...)
}

func run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%s: %s", strings.Join(args, " "), out)
	return string(out)
}

func TestSetup(t *testing.T) {
	p := newPod(t)
	o := Options{Net: netip.MustParsePrefix("10.0.2.0/24"), Reserved: []Port{{"TCP", 5900}}, MAC: "52:54:00:70:6F:64"}
	n, err := p.setup(t, o)
	require.NoError(t, err)
	require.Equal(t, "eth0", n.Uplink)
	require.Equal(t, netip.MustParseAddr("10.98.7.2"), n.PodIP)
	require.Equal(t, 1450, n.MTU)
	require.Equal(t, netip.MustParseAddr("10.0.2.2"), n.Gateway)
	require.Equal(t, netip.MustParsePrefix("10.0.2.15/24"), n.Guest)

	link := p.run(t, "ip", "-o", "addr", "show", "dev", Tap)
	require.Contains(t, link, "inet 10.0.2.2/24")
	require.Contains(t, p.run(t, "ip", "link", "show", Tap), "mtu 1450")
	require.Equal(t, "1\n", p.run(t, "cat", "/proc/sys/net/ipv4/ip_forward"))

	rules := p.run(t, "nft", "list", "table", "ip", table)
	// The pod's own port first, untranslated; then everything else.
	require.Regexp(t, `(?s)iifname "eth0" tcp dport 5900 accept.*iifname "eth0" meta l4proto tcp dnat to 10\.0\.2\.15.*iifname "eth0" meta l4proto udp dnat to 10\.0\.2\.15`, rules)
	require.Regexp(t, `oifname "eth0" ip saddr 10\.0\.2\.0/24 masquerade`, rules)
	guard := p.run(t, "nft", "list", "table", "netdev", table)
	require.Contains(t, guard, `type filter hook ingress device "vmtap0" priority filter; policy drop;`)
	require.Contains(t, guard, "ether saddr != 52:54:00:70:6f:64 drop")
	require.Contains(t, guard, "ip saddr 10.0.2.15 accept")

	t.Run("again, with listed ports, replaces the rules", func(t *testing.T) {
		o.Ports = []Port{{"TCP", 22}, {"UDP", 53}}
		_, err := p.setup(t, o)
		require.NoError(t, err)
		rules := p.run(t, "nft", "list", "table", "ip", table)
		require.Regexp(t, `tcp dport 22 dnat to 10\.0\.2\.15`, rules)
		require.Regexp(t, `udp dport 53 dnat to 10\.0\.2\.15`, rules)
		require.NotRegexp(t, `l4proto tcp dnat`, rules)
		require.Equal(t, 1, strings.Count(rules, "masquerade"), rules)
		guard := p.run(t, "nft", "list", "table", "netdev", table)
		require.Equal(t, 1, strings.Count(guard, "ip saddr 10.0.2.15 accept"), guard)
	})

	t.Run("a MAC that is not one is refused", func(t *testing.T) {
		_, err := p.setup(t, Options{Net: o.Net, MAC: "52:54:00"})
		require.ErrorContains(t, err, `the guest's MAC "52:54:00": not an Ethernet address`)
	})

	t.Run("a guest network that overlaps the pod's is refused", func(t *testing.T) {
		_, err := p.setup(t, Options{Net: netip.MustParsePrefix("10.98.0.0/16")})
		require.ErrorContains(t, err, "the guest network 10.98.0.0/16 overlaps the pod's 10.98.7.2/24")
	})
}

func TestSetupWithoutDefaultRoute(t *testing.T) {
	p := newPod(t)
	p.run(t, "ip", "route", "del", "default")
	_, err := p.setup(t, Options{Net: netip.MustParsePrefix("10.0.2.0/24")})
	require.ErrorContains(t, err, "the pod has no IPv4 default route")
}

func TestReadResolvConf(t *testing.T) {
	f := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(f, []byte("# kubelet\nsearch ns.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\nnameserver fd00::a\noptions ndots:5\n"), 0o644))
	dns, search := ResolvConf(f)
	require.Equal(t, []netip.Addr{netip.MustParseAddr("10.96.0.10")}, dns)
	require.Equal(t, []string{"ns.svc.cluster.local", "svc.cluster.local"}, search)
	dns, search = ResolvConf(filepath.Join(t.TempDir(), "none"))
	require.Nil(t, dns)
	require.Nil(t, search)
}
