package csidriver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// identity is the CSI Identity service.
type identity struct {
	csi.UnimplementedIdentityServer
}

func (identity) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: "devel"}, nil
}

// GetPluginCapabilities offers the controller, without topology: the
// node is the only one, and claims bind wherever.
func (identity) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{Capabilities: []*csi.PluginCapability{{
		Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{
			Type: csi.PluginCapability_Service_CONTROLLER_SERVICE,
		}},
	}}}, nil
}

func (identity) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
}

// controller is the CSI Controller service on the store. One call at a
// time: the sidecars retry and run calls in parallel, and a name's second
// call must find what its first made.
type controller struct {
	csi.UnimplementedControllerServer
	store *store
	mu    sync.Mutex
}

// defaultSize is a volume's size when the request names none.
const defaultSize = 1 << 30

// sectorSize aligns a volume's size: a loop device's is whole sectors.
const sectorSize = 512

func (c *controller) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	var caps []*csi.ControllerServiceCapability
	for _, t := range []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_SNAPSHOT,
		csi.ControllerServiceCapability_RPC_LIST_SNAPSHOTS,
		csi.ControllerServiceCapability_RPC_CLONE_VOLUME,
	} {
		caps = append(caps, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: t},
		}})
	}
	return &csi.ControllerGetCapabilitiesResponse{Capabilities: caps}, nil
}

// isBlock says whether capabilities ask for a Block volume (else a
// Filesystem one); they may not ask for both.
func isBlock(caps []*csi.VolumeCapability) (bool, error) {
	if len(caps) == 0 {
		return false, status.Error(codes.InvalidArgument, "volume capabilities missing")
	}
	var block, mount bool
	for _, c := range caps {
		switch {
		case c.GetBlock() != nil:
			block = true
		case c.GetMount() != nil:
			mount = true
		default:
			return false, status.Error(codes.InvalidArgument, "a volume capability is neither block nor mount")
		}
	}
	if block && mount {
		return false, status.Error(codes.InvalidArgument, "block and mount capabilities together")
	}
	return block, nil
}

// sizeOf is the size a capacity range asks for, at least minimum (a
// content source's size), whole sectors.
func sizeOf(r *csi.CapacityRange, minimum int64) (int64, error) {
	required, limit := r.GetRequiredBytes(), r.GetLimitBytes()
	if required < 0 || limit < 0 || (limit > 0 && required > limit) {
		return 0, status.Errorf(codes.InvalidArgument, "capacity range %d-%d", required, limit)
	}
	size := required
	if size == 0 {
		size = defaultSize
		if limit > 0 {
			size = min(size, limit)
		}
	}
	size = max(size, minimum)
	size = (size + sectorSize - 1) / sectorSize * sectorSize
	if limit > 0 && size > limit {
		return 0, status.Errorf(codes.OutOfRange, "%d bytes (the content source's %d) exceed the limit %d", size, minimum, limit)
	}
	return size, nil
}

func (c *controller) CreateVolume(_ context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	block, err := isBlock(req.GetVolumeCapabilities())
	if err != nil {
		return nil, err
	}
	src := req.GetVolumeContentSource()
	r := record{
		ID: idOf(req.GetName()), Name: req.GetName(), Block: block, Created: time.Now().UTC(),
		FromSnapshot: src.GetSnapshot().GetSnapshotId(), FromVolume: src.GetVolume().GetVolumeId(),
	}
	if src != nil && r.FromSnapshot == "" && r.FromVolume == "" {
		return nil, status.Error(codes.InvalidArgument, "unknown volume content source")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, err := c.store.get(volumes, r.ID)
	switch {
	case err == nil:
		// A retry, or the name's second volume.
		required, limit := req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes()
		if old.Block != r.Block || old.Size < required || (limit > 0 && old.Size > limit) ||
			old.FromSnapshot != r.FromSnapshot || old.FromVolume != r.FromVolume {
			return nil, status.Errorf(codes.AlreadyExists, "volume %s exists: %s, %d bytes, from snapshot %q, volume %q",
				r.Name, mode(old.Block), old.Size, old.FromSnapshot, old.FromVolume)
		}
		return &csi.CreateVolumeResponse{Volume: volumeOf(old)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, status.Error(codes.Internal, err.Error())
	}

	// The source's data, and its size, the volume's least.
	var from string
	var minimum int64
	switch {
	case r.FromSnapshot != "":
		s, err := c.store.get(snapshots, r.FromSnapshot)
		if err != nil {
			return nil, notFound(err, "snapshot", r.FromSnapshot)
		}
		if s.Block != block {
			return nil, status.Errorf(codes.InvalidArgument, "snapshot %s is of a %s volume", s.ID, mode(s.Block))
		}
		from, minimum = c.store.dataPath(snapshots, s.ID, s.Block), s.Size
	case r.FromVolume != "":
		v, err := c.store.get(volumes, r.FromVolume)
		if err != nil {
			return nil, notFound(err, "volume", r.FromVolume)
		}
		if v.Block != block {
			return nil, status.Errorf(codes.InvalidArgument, "volume %s is a %s volume", v.ID, mode(v.Block))
		}
		from, minimum = c.store.dataPath(volumes, v.ID, v.Block), v.Size
		if block {
			if err := flushLoops(from); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
	}
	if r.Size, err = sizeOf(req.GetCapacityRange(), minimum); err != nil {
		return nil, err
	}
	if err := c.store.create(volumes, r, from); err != nil {
		return nil, status.Errorf(codes.Internal, "create volume %s: %v", r.Name, err)
	}
	return &csi.CreateVolumeResponse{Volume: volumeOf(r)}, nil
}

// volumeOf is a volume as CSI returns it: with its content source, which
// csi-provisioner requires of a volume it asked one for.
func volumeOf(r record) *csi.Volume {
	v := &csi.Volume{VolumeId: r.ID, CapacityBytes: r.Size}
	switch {
	case r.FromSnapshot != "":
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: r.FromSnapshot},
		}}
	case r.FromVolume != "":
		v.ContentSource = &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: r.FromVolume},
		}}
	}
	return v
}

func (c *controller) DeleteVolume(_ context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.store.remove(volumes, req.GetVolumeId()); err != nil {
		return nil, status.Errorf(codes.Internal, "delete volume %s: %v", req.GetVolumeId(), err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

func (c *controller) ValidateVolumeCapabilities(_ context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "volume ID missing")
	}
	block, err := isBlock(req.GetVolumeCapabilities())
	if err != nil {
		return nil, err
	}
	v, err := c.store.get(volumes, req.GetVolumeId())
	if err != nil {
		return nil, notFound(err, "volume", req.GetVolumeId())
	}
	if v.Block != block {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: "the volume is a " + mode(v.Block) + " volume"}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters(),
	}}, nil
}

// CreateSnapshot copies the volume at once: the snapshot is ready when
// the call returns.
func (c *controller) CreateSnapshot(_ context.Context, req *csi.CreateSnapshotRequest) (*csi.CreateSnapshotResponse, error) {
	if req.GetName() == "" {
		return nil, status.Error(codes.InvalidArgument, "name missing")
	}
	if req.GetSourceVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "source volume ID missing")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id := idOf(req.GetName())
	old, err := c.store.get(snapshots, id)
	switch {
	case err == nil:
		if old.Source != req.GetSourceVolumeId() {
			return nil, status.Errorf(codes.AlreadyExists, "snapshot %s exists, of volume %s", req.GetName(), old.Source)
		}
		return &csi.CreateSnapshotResponse{Snapshot: snapshotOf(old)}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, status.Error(codes.Internal, err.Error())
	}
	v, err := c.store.get(volumes, req.GetSourceVolumeId())
	if err != nil {
		return nil, notFound(err, "volume", req.GetSourceVolumeId())
	}
	data := c.store.dataPath(volumes, v.ID, v.Block)
	if v.Block {
		if err := flushLoops(data); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	s := record{ID: id, Name: req.GetName(), Block: v.Block, Size: v.Size, Source: v.ID, Created: time.Now().UTC()}
	if err := c.store.create(snapshots, s, data); err != nil {
		return nil, status.Errorf(codes.Internal, "snapshot %s: %v", req.GetName(), err)
	}
	return &csi.CreateSnapshotResponse{Snapshot: snapshotOf(s)}, nil
}

func snapshotOf(r record) *csi.Snapshot {
	return &csi.Snapshot{
		SnapshotId: r.ID, SourceVolumeId: r.Source, SizeBytes: r.Size,
		CreationTime: timestamppb.New(r.Created), ReadyToUse: true,
	}
}

func (c *controller) DeleteSnapshot(_ context.Context, req *csi.DeleteSnapshotRequest) (*csi.DeleteSnapshotResponse, error) {
	if req.GetSnapshotId() == "" {
		return nil, status.Error(codes.InvalidArgument, "snapshot ID missing")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.store.remove(snapshots, req.GetSnapshotId()); err != nil {
		return nil, status.Errorf(codes.Internal, "delete snapshot %s: %v", req.GetSnapshotId(), err)
	}
	return &csi.DeleteSnapshotResponse{}, nil
}

// ListSnapshots lists by ID; a page's token is the index of its first
// entry.
func (c *controller) ListSnapshots(_ context.Context, req *csi.ListSnapshotsRequest) (*csi.ListSnapshotsResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	all, err := c.store.list(snapshots)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	var match []record
	for _, s := range all {
		if (req.GetSnapshotId() == "" || s.ID == req.GetSnapshotId()) &&
			(req.GetSourceVolumeId() == "" || s.Source == req.GetSourceVolumeId()) {
			match = append(match, s)
		}
	}
	start := 0
	if t := req.GetStartingToken(); t != "" {
		if start, err = strconv.Atoi(t); err != nil || start < 0 || start > len(match) {
			return nil, status.Errorf(codes.Aborted, "starting token %q", t)
		}
	}
	end := len(match)
	if n := int(req.GetMaxEntries()); n > 0 && start+n < end {
		end = start + n
	}
	resp := &csi.ListSnapshotsResponse{}
	for _, s := range match[start:end] {
		resp.Entries = append(resp.Entries, &csi.ListSnapshotsResponse_Entry{Snapshot: snapshotOf(s)})
	}
	if end < len(match) {
		resp.NextToken = strconv.Itoa(end)
	}
	return resp, nil
}

// notFound is NotFound for a missing record, Internal for another error.
func notFound(err error, what, id string) error {
	if errors.Is(err, fs.ErrNotExist) {
		return status.Errorf(codes.NotFound, "%s %s not found", what, id)
	}
	return status.Error(codes.Internal, fmt.Sprintf("%s %s: %v", what, id, err))
}

func mode(block bool) string {
	if block {
		return "Block"
	}
	return "Filesystem"
}
