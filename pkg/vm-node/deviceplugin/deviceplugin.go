// Package deviceplugin is vm-node's kubelet device plugin. It advertises
// nodeagent.Resource as a number of identical devices, one per VM pod the
// node may run, and gives each container that requests one the device
// nodes qemu needs: /dev/net/tun, /dev/kvm (where KVM is usable) and
// /dev/vhost-net. So a VM pod gets them without privilege, and is only
// scheduled to nodes that run the agent.
package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/kvm"
)

const (
	// Socket is the plugin's socket in the device plugin directory.
	Socket = "vmop-vm.sock"
	// DefaultDevices is the kubelet's default limit of pods per node: no
	// more VM pods than that can run on a node anyway.
	DefaultDevices = 110
)

// Options configure a Plugin; the zero value is the production setup.
type Options struct {
	// Log receives what the plugin does; nil: slog.Default().
	Log *slog.Logger
	// Devices is how many devices (VM pods) to advertise; 0: DefaultDevices.
	Devices int
	// Dir is the kubelet's device plugin directory, which holds
	// kubelet.sock and the plugin's Socket; "": v1beta1.DevicePluginPath.
	Dir string
	// Dev is the host's /dev; "": "/dev". Containers get the devices at
	// /dev whatever it is.
	Dev string
	// KVMUsable returns nil when /dev/kvm can run guests, and Run offers
	// it then; Run asks once. nil: kvm.Usable.
	KVMUsable func() error
}

// Plugin is the device plugin. Run it once.
type Plugin struct {
	o    Options
	kvm  bool          // /dev/kvm is offered; set once by Run
	poll time.Duration // how often Run checks for a restarted kubelet

	srv      *grpc.Server
	sock     fileID // our socket while srv serves it
	kubelet  fileID // the kubelet.sock we registered with; zero: not registered
	lastFail string // the failure logged last, so that a retry logs no repeat
}

// New returns a plugin for o.
func New(o Options) *Plugin {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Devices <= 0 {
		o.Devices = DefaultDevices
	}
	if o.Dir == "" {
		o.Dir = v1beta1.DevicePluginPath
	}
	if o.Dev == "" {
		o.Dev = "/dev"
	}
	if o.KVMUsable == nil {
		o.KVMUsable = kvm.Usable
	}
	return &Plugin{o: o, poll: time.Second}
}

// Run serves the plugin and keeps it registered with the kubelet until ctx
// ends, then removes its socket and returns nil. It retries what may pass
// (no kubelet yet, no Dir yet), logging each new failure once, and returns
// an error only when it cannot listen on its socket at all.
func (p *Plugin) Run(ctx context.Context) error {
	if err := p.o.KVMUsable(); err != nil {
		p.o.Log.Info("not offering /dev/kvm", "reason", err)
	} else {
		p.kvm = true
	}
	defer p.stop()
	t := time.NewTicker(p.poll)
	defer t.Stop()
	for {
		err := p.check(ctx)
		var f fatal
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &f):
			return err
		case err == nil:
			p.lastFail = ""
		case err.Error() != p.lastFail:
			p.lastFail = err.Error()
			p.o.Log.Warn(err.Error() + "; retrying every " + p.poll.String())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// fatal is an error that retrying does not change.
type fatal struct{ error }

func (f fatal) Unwrap() error { return f.error }

// check brings the plugin to serving and registered: it restarts it when
// the kubelet has restarted since it registered, which removes all sockets
// in Dir and makes a new kubelet.sock.
func (p *Plugin) check(ctx context.Context) error {
	kubeletSock := filepath.Join(p.o.Dir, "kubelet.sock")
	if p.srv != nil {
		switch id := identify(p.socket()); {
		case id == (fileID{}) || id != p.sock: // zero p.sock: gone at once
			p.o.Log.Info("the plugin's socket is gone: the kubelet restarted")
			p.stop()
		case p.kubelet != (fileID{}) && identify(kubeletSock) != p.kubelet:
			p.o.Log.Info("kubelet.sock is new: the kubelet restarted")
			p.stop()
		}
	}
	if p.srv == nil {
		if err := p.serve(); err != nil {
			return err
		}
	}
	if p.kubelet != (fileID{}) {
		return nil
	}
	// Identified before registering: should the kubelet restart
	// meanwhile, the next check sees a new one and registers again.
	id := identify(kubeletSock)
	if id == (fileID{}) {
		return fmt.Errorf("waiting for the kubelet: no %s", kubeletSock)
	}
	if err := p.register(ctx, kubeletSock); err != nil {
		// Not fatal even when the kubelet answers: it also refuses when
		// it cannot connect back to the plugin.
		return fmt.Errorf("registering with the kubelet at %s: %w", kubeletSock, err)
	}
	p.kubelet = id
	p.o.Log.Info("registered with the kubelet", "resource", nodeagent.Resource, "devices", p.o.Devices, "socket", p.socket())
	return nil
}

func (p *Plugin) socket() string { return filepath.Join(p.o.Dir, Socket) }

// serve listens on the plugin's socket, in place of any left behind.
func (p *Plugin) serve() error {
	sock := p.socket()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		err = fmt.Errorf("serving the device plugin: %w", err)
		if errors.Is(err, os.ErrNotExist) {
			return err // the kubelet makes Dir
		}
		return fatal{err}
	}
	// stop removes it: a listener that closed late would remove the next.
	l.SetUnlinkOnClose(false)
	p.srv = grpc.NewServer()
	v1beta1.RegisterDevicePluginServer(p.srv, &server{p: p})
	go p.srv.Serve(l) //nolint:errcheck // ends with Stop, which stop calls
	p.sock = identify(sock)
	p.kubelet = fileID{}
	return nil
}

// stop ends the server, and its ListAndWatch streams, and removes its
// socket.
func (p *Plugin) stop() {
	if p.srv == nil {
		return
	}
	p.srv.Stop()
	p.srv = nil
	p.kubelet = fileID{}
	if identify(p.socket()) == p.sock {
		os.Remove(p.socket())
	}
}

// registerTimeout bounds a registration, dial included.
const registerTimeout = 10 * time.Second

func (p *Plugin) register(ctx context.Context, kubeletSock string) error {
	conn, err := grpc.NewClient("unix://"+kubeletSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	_, err = v1beta1.NewRegistrationClient(conn).Register(ctx, &v1beta1.RegisterRequest{
		Version:      v1beta1.Version,
		Endpoint:     Socket,
		ResourceName: nodeagent.Resource,
		Options:      &v1beta1.DevicePluginOptions{},
	})
	return err
}

// fileID tells a file from one made in its place: file systems such as
// ext4 give a new file the inode number of the one just removed.
type fileID struct {
	ino   uint64
	ctime syscall.Timespec
}

// identify is path's fileID, zero when there is none.
func identify(path string) fileID {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}
	}
	return fileID{st.Ino, st.Ctim}
}

// server is the plugin's gRPC service, apart so that its methods are not
// Plugin's API.
type server struct {
	v1beta1.UnimplementedDevicePluginServer
	p *Plugin
}

func (s *server) GetDevicePluginOptions(context.Context, *v1beta1.Empty) (*v1beta1.DevicePluginOptions, error) {
	return &v1beta1.DevicePluginOptions{}, nil
}

// ListAndWatch sends the devices once: they are not real, so they never
// fail. It returns when the kubelet goes or the server stops.
func (s *server) ListAndWatch(_ *v1beta1.Empty, stream grpc.ServerStreamingServer[v1beta1.ListAndWatchResponse]) error {
	devs := make([]*v1beta1.Device, s.p.o.Devices)
	for i := range devs {
		devs[i] = &v1beta1.Device{ID: fmt.Sprintf("vm-%d", i), Health: v1beta1.Healthy}
	}
	if err := stream.Send(&v1beta1.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

// Allocate gives every container the same devices, whichever it got.
func (s *server) Allocate(_ context.Context, req *v1beta1.AllocateRequest) (*v1beta1.AllocateResponse, error) {
	specs := s.p.deviceSpecs()
	resp := &v1beta1.AllocateResponse{}
	for range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &v1beta1.ContainerAllocateResponse{Devices: specs})
	}
	return resp, nil
}

// deviceSpecs are the device nodes a VM pod's containers get. They are
// looked up on every allocation: a device the runtime cannot find would
// fail the container, and one that appears later (a module loaded after
// the agent started) is then offered.
func (p *Plugin) deviceSpecs() []*v1beta1.DeviceSpec {
	names := []string{"net/tun", "vhost-net"}
	if p.kvm {
		names = append(names, "kvm")
	}
	var specs []*v1beta1.DeviceSpec
	for _, n := range names {
		host := filepath.Join(p.o.Dev, n)
		fi, err := os.Stat(host)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			continue
		}
		specs = append(specs, &v1beta1.DeviceSpec{HostPath: host, ContainerPath: "/dev/" + n, Permissions: "rw"})
	}
	return specs
}
