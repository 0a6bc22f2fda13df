package csidriver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// node is the CSI Node service: it publishes a volume where the kubelet
// asks by a bind mount, of the volume's loop device onto a file (Block)
// or of its directory (Filesystem). There is no staging: without the
// STAGE_UNSTAGE_VOLUME capability the kubelet publishes directly.
type node struct {
	csi.UnimplementedNodeServer
	store  *store
	nodeID string

	mu sync.Mutex
	// published are the targets mounted, for Stop.
	published map[string]bool
}

func (n *node) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	return &csi.NodeGetInfoResponse{NodeId: n.nodeID}, nil
}

func (n *node) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

func (n *node) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	target := req.GetTargetPath()
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case target == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	case req.GetVolumeCapability() == nil:
		return nil, status.Error(codes.InvalidArgument, "volume capability missing")
	}
	block, err := isBlock([]*csi.VolumeCapability{req.GetVolumeCapability()})
	if err != nil {
		return nil, err
	}
	v, err := n.store.get(volumes, req.GetVolumeId())
	if err != nil {
		return nil, notFound(err, "volume", req.GetVolumeId())
	}
	if v.Block != block {
		return nil, status.Errorf(codes.InvalidArgument, "volume %s is a %s volume", v.ID, mode(v.Block))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	mounted, err := isMountPoint(target)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted {
		return &csi.NodePublishVolumeResponse{}, nil
	}
	source := n.store.dataPath(volumes, v.ID, v.Block)
	if block {
		if source, err = loopOf(source); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		// The kubelet makes the target's directory; the target is a
		// file, for the device node.
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o660)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		f.Close()
	} else if err := os.MkdirAll(target, 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if err := unix.Mount(source, target, "", unix.MS_BIND, ""); err != nil {
		return nil, status.Errorf(codes.Internal, "bind mount %s on %s: %v", source, target, err)
	}
	n.published[target] = true
	if req.GetReadonly() {
		if err := unix.Mount("", target, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			_ = n.unmount(target)
			return nil, status.Errorf(codes.Internal, "remount %s read-only: %v", target, err)
		}
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

func (n *node) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	switch {
	case req.GetVolumeId() == "":
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	case req.GetTargetPath() == "":
		return nil, status.Error(codes.InvalidArgument, "target path missing")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.unmount(req.GetTargetPath()); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// unmount undoes a publish: it unmounts target (every mount stacked there)
// and removes the file or directory, as CSI asks of the driver that made
// it. A target that is not there is unmounted already.
func (n *node) unmount(target string) error {
	for {
		mounted, err := isMountPoint(target)
		if err != nil {
			return err
		}
		if !mounted {
			break
		}
		if err := unix.Unmount(target, 0); err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
	}
	delete(n.published, target)
	if err := os.Remove(target); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// unmountAll undoes every publish that is left, for Stop: lazily, as a
// container may still hold one.
func (n *node) unmountAll() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for target := range n.published {
		for {
			mounted, err := isMountPoint(target)
			if err != nil || !mounted {
				break
			}
			if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmount %s: %w", target, err))
				break
			}
		}
		delete(n.published, target)
		_ = os.Remove(target)
	}
	return errors.Join(errs...)
}

// isMountPoint says whether something is mounted at path.
func isMountPoint(path string) (bool, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	path = filepath.Clean(path)
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountPath(f[4]) == path {
			return true, nil
		}
	}
	return false, nil
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(c))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
