package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/syncbuffer"
)

const timeout = 10 * time.Second

// fakeKubelet is the kubelet's Registration service on kubelet.sock.
type fakeKubelet struct {
	v1beta1.UnimplementedRegistrationServer
	srv  *grpc.Server
	fail atomic.Int32 // answer this many registrations with Unavailable

	mu   sync.Mutex
	reqs []*v1beta1.RegisterRequest
}

// startKubelet serves a fakeKubelet on dir's kubelet.sock. It renames
// its socket over any there, so that kubelet.sock changes at once: the
// replaced one keeps its inode number until its kubelet stops.
func startKubelet(t *testing.T, dir string, fail int32) *fakeKubelet {
	t.Helper()
	tmp := filepath.Join(dir, "kubelet.sock.new")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	require.NoError(t, err)
	l.SetUnlinkOnClose(false)
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "kubelet.sock")))
	k := &fakeKubelet{srv: grpc.NewServer()}
	k.fail.Store(fail)
	v1beta1.RegisterRegistrationServer(k.srv, k)
	go k.srv.Serve(l) //nolint:errcheck // ends with Stop
	t.Cleanup(k.srv.Stop)
	return k
}

func (k *fakeKubelet) Register(_ context.Context, r *v1beta1.RegisterRequest) (*v1beta1.Empty, error) {
	if k.fail.Add(-1) >= 0 {
		return nil, status.Error(codes.Unavailable, "the kubelet is starting")
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.reqs = append(k.reqs, r)
	return &v1beta1.Empty{}, nil
}

// registered waits for the kubelet's n-th registration and checks it.
func (k *fakeKubelet) registered(t *testing.T, n int) {
	t.Helper()
	var r *v1beta1.RegisterRequest
	eventually.Within(t, timeout, func() string {
		k.mu.Lock()
		defer k.mu.Unlock()
		if len(k.reqs) < n {
			return fmt.Sprintf("%d registrations, want %d", len(k.reqs), n)
		}
		r = k.reqs[n-1]
		return ""
	})
	require.Equal(t, v1beta1.Version, r.Version)
	require.Equal(t, Socket, r.Endpoint)
	require.Equal(t, nodeagent.Resource, r.ResourceName)
	require.NotNil(t, r.Options)
	require.False(t, r.Options.PreStartRequired)
	require.False(t, r.Options.GetPreferredAllocationAvailable)
}

// run runs a plugin for o until the test ends, polling every 10ms.
func run(t *testing.T, o Options) {
	t.Helper()
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	p := New(o)
	p.poll = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-errc)
		require.NoFileExists(t, filepath.Join(o.Dir, Socket))
	})
}

// dial connects to the plugin as the kubelet does, once it serves.
func dial(t *testing.T, dir string) v1beta1.DevicePluginClient {
	t.Helper()
	sock := filepath.Join(dir, Socket)
	// Connected once: the socket appears before it listens.
	eventually.Succeeds(t, timeout, func() error {
		c, err := net.DialTimeout("unix", sock, timeout)
		if err == nil {
			c.Close()
		}
		return err
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return v1beta1.NewDevicePluginClient(conn)
}

func listDevices(t *testing.T, c v1beta1.DevicePluginClient) []*v1beta1.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	stream, err := c.ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	resp, err := stream.Recv()
	require.NoError(t, err)
	return resp.Devices
}

// allocate asks for devices for two containers and returns each one's
// device specs as "host container permissions".
func allocate(t *testing.T, c v1beta1.DevicePluginClient) [][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	resp, err := c.Allocate(ctx, &v1beta1.AllocateRequest{ContainerRequests: []*v1beta1.ContainerAllocateRequest{
		{DevicesIds: []string{"vm-0"}}, {DevicesIds: []string{"vm-1"}},
	}})
	require.NoError(t, err)
	var all [][]string
	for _, cr := range resp.ContainerResponses {
		specs := []string{}
		for _, d := range cr.Devices {
			specs = append(specs, d.HostPath+" "+d.ContainerPath+" "+d.Permissions)
		}
		all = append(all, specs)
	}
	return all
}

// fakeDev is a /dev with the given character devices (links to /dev/null,
// which needs no root) and regular files.
func fakeDev(t *testing.T, chars, files []string) string {
	t.Helper()
	dev := t.TempDir()
	for _, n := range append(chars, files...) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dev, n)), 0o755))
	}
	for _, n := range chars {
		require.NoError(t, os.Symlink("/dev/null", filepath.Join(dev, n)))
	}
	for _, n := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dev, n), nil, 0o644))
	}
	return dev
}

func usable(ok bool) func() error {
	if ok {
		return func() error { return nil }
	}
	return func() error { return errors.New("kvm_pvm") }
}

func TestRegisterListAllocate(t *testing.T) {
	dir := t.TempDir()
	dev := fakeDev(t, []string{"net/tun", "kvm"}, []string{"vhost-net"})
	k := startKubelet(t, dir, 0)
	run(t, Options{Dir: dir, Dev: dev, Devices: 3, KVMUsable: usable(true)})
	k.registered(t, 1)
	c := dial(t, dir)

	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	opts, err := c.GetDevicePluginOptions(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	require.False(t, opts.PreStartRequired)
	require.False(t, opts.GetPreferredAllocationAvailable)

	devs := listDevices(t, c)
	require.Len(t, devs, 3)
	ids := map[string]bool{}
	for _, d := range devs {
		require.Equal(t, v1beta1.Healthy, d.Health)
		ids[d.ID] = true
	}
	require.Len(t, ids, 3, "device IDs are unique")

	// vhost-net is a regular file here, not a device.
	want := []string{dev + "/net/tun /dev/net/tun rw", dev + "/kvm /dev/kvm rw"}
	require.Equal(t, [][]string{want, want}, allocate(t, c))
}

func TestAllocate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chars  []string
		usable bool
		want   []string
	}{
		{"all", []string{"net/tun", "kvm", "vhost-net"}, true, []string{"net/tun", "vhost-net", "kvm"}},
		{"KVM not usable", []string{"net/tun", "kvm", "vhost-net"}, false, []string{"net/tun", "vhost-net"}},
		{"no /dev/kvm", []string{"net/tun", "vhost-net"}, true, []string{"net/tun", "vhost-net"}},
		{"no /dev/vhost-net", []string{"net/tun", "kvm"}, true, []string{"net/tun", "kvm"}},
		{"none", nil, true, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			dev := fakeDev(t, tc.chars, nil)
			run(t, Options{Dir: dir, Dev: dev, KVMUsable: usable(tc.usable)})
			c := dial(t, dir)
			want := []string{}
			for _, n := range tc.want {
				want = append(want, fmt.Sprintf("%s/%s /dev/%s rw", dev, n, n))
			}
			require.Equal(t, [][]string{want, want}, allocate(t, c))
			require.Len(t, listDevices(t, c), DefaultDevices)
		})
	}
}

func TestKubeletRestart(t *testing.T) {
	dir := t.TempDir()
	k := startKubelet(t, dir, 0)
	run(t, Options{Dir: dir, Dev: fakeDev(t, []string{"net/tun"}, nil), Devices: 2})
	k.registered(t, 1)
	sock := filepath.Join(dir, Socket)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	stream, err := dial(t, dir).ListAndWatch(ctx, &v1beta1.Empty{})
	require.NoError(t, err)
	_, err = stream.Recv()
	require.NoError(t, err)

	// The plugin's socket gone is taken for a restart,
	require.NoError(t, os.Remove(sock))
	k.registered(t, 2)
	require.Len(t, listDevices(t, dial(t, dir)), 2)
	_, err = stream.Recv()
	require.Error(t, err, "the old server's stream ends")

	// and a new kubelet.sock is too,
	old := k
	k = startKubelet(t, dir, 0)
	old.srv.Stop()
	k.registered(t, 1)
	require.Len(t, listDevices(t, dial(t, dir)), 2)

	// so a restarting kubelet, which removes every socket there and then
	// makes kubelet.sock, is registered with.
	require.NoError(t, os.Remove(sock))
	old = k
	k = startKubelet(t, dir, 0)
	old.srv.Stop()
	k.registered(t, 1)
	require.Len(t, listDevices(t, dial(t, dir)), 2)
}

func TestWaitForKubelet(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "dp")
	var logs syncbuffer.Buffer
	run(t, Options{Dir: dir, Dev: t.TempDir(), Log: slog.New(slog.NewTextHandler(&logs, nil))})
	logged := func(s string) func() string {
		return func() string {
			if !strings.Contains(logs.String(), s) {
				return fmt.Sprintf("no %q in the log:\n%s", s, logs.String())
			}
			return ""
		}
	}

	// Before the kubelet made its directory (not /dev/kvm's ENOENT on a
	// machine without KVM),
	eventually.Within(t, timeout, logged("bind: no such file or directory"))
	require.NoError(t, os.Mkdir(dir, 0o755))
	// before it listens
	eventually.Within(t, timeout, logged("waiting for the kubelet"))
	// and while it refuses.
	k := startKubelet(t, dir, 3)
	k.registered(t, 1)
	eventually.Within(t, timeout, logged("registered with the kubelet"))
	require.Equal(t, int32(-1), k.fail.Load(), "three refusals, then one registration")

	for _, s := range []string{"bind: no such file or directory", "waiting for the kubelet", "the kubelet is starting"} {
		require.Equal(t, 1, strings.Count(logs.String(), s), "logged once: %q in\n%s", s, logs.String())
	}
}

func TestCannotListen(t *testing.T) {
	// Longer than a unix socket's path can be.
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 110))
	require.NoError(t, os.Mkdir(dir, 0o755))
	p := New(Options{Dir: dir, Log: slog.New(slog.DiscardHandler)})
	p.poll = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	err := p.Run(ctx)
	require.ErrorContains(t, err, "serving the device plugin")
}
