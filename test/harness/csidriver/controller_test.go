package csidriver

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vmop/vmop/test/harness/prereq"
)

var (
	mountCap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}}}
	blockCap = &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}
)

func newController(t *testing.T) *controller {
	s, err := newStore(t.TempDir())
	require.NoError(t, err)
	return &controller{store: s}
}

func requireCode(t *testing.T, want codes.Code, err error) {
	t.Helper()
	require.Error(t, err)
	require.Equal(t, want.String(), status.Code(err).String(), "%v", err)
}

func fromSnapshot(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: id}}}
}

func fromVolume(id string) *csi.VolumeContentSource {
	return &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}}
}

// TestController walks the controller through Filesystem volumes, which
// need no root: creation and its retries, snapshots as point-in-time
// copies, restores and clones, listing, deletion, and the errors the
// sidecars tell apart.
func TestController(t *testing.T) {
	ctx := t.Context()
	c := newController(t)
	mib := &csi.CapacityRange{RequiredBytes: 1 << 20}

	_, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{VolumeCapabilities: []*csi.VolumeCapability{mountCap}})
	requireCode(t, codes.InvalidArgument, err)
	_, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x"})
	requireCode(t, codes.InvalidArgument, err)
	_, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{mountCap, blockCap}})
	requireCode(t, codes.InvalidArgument, err)
	_, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "x", VolumeCapabilities: []*csi.VolumeCapability{mountCap},
		CapacityRange: &csi.CapacityRange{RequiredBytes: 2, LimitBytes: 1}})
	requireCode(t, codes.InvalidArgument, err)

	create := func(name string, cr *csi.CapacityRange, src *csi.VolumeContentSource) (*csi.Volume, error) {
		resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{
			Name: name, CapacityRange: cr, VolumeCapabilities: []*csi.VolumeCapability{mountCap}, VolumeContentSource: src,
		})
		return resp.GetVolume(), err
	}
	a, err := create("pvc-a", mib, nil)
	require.NoError(t, err)
	require.Equal(t, "pvc-a", a.GetVolumeId())
	require.EqualValues(t, 1<<20, a.GetCapacityBytes())
	again, err := create("pvc-a", mib, nil)
	require.NoError(t, err, "a retry")
	require.Equal(t, a.GetVolumeId(), again.GetVolumeId())
	_, err = create("pvc-a", &csi.CapacityRange{RequiredBytes: 2 << 20}, nil)
	requireCode(t, codes.AlreadyExists, err)
	_, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-a", VolumeCapabilities: []*csi.VolumeCapability{blockCap}})
	requireCode(t, codes.AlreadyExists, err)
	odd, err := create("a name/with ../ in it", nil, nil)
	require.NoError(t, err)
	require.Regexp(t, `^h-[0-9a-f]{32}$`, odd.GetVolumeId())
	require.EqualValues(t, defaultSize, odd.GetCapacityBytes())

	dir := filepath.Join(c.store.dir, "volumes", "pvc-a")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("before"), 0o644))

	snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: "pvc-a"})
	require.NoError(t, err)
	s := snap.GetSnapshot()
	require.True(t, s.GetReadyToUse())
	require.Equal(t, "pvc-a", s.GetSourceVolumeId())
	require.EqualValues(t, 1<<20, s.GetSizeBytes())
	require.NotNil(t, s.GetCreationTime())
	again2, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: "pvc-a"})
	require.NoError(t, err, "a retry")
	require.Equal(t, s.GetSnapshotId(), again2.GetSnapshot().GetSnapshotId())
	require.Equal(t, s.GetCreationTime().AsTime(), again2.GetSnapshot().GetCreationTime().AsTime())
	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-1", SourceVolumeId: odd.GetVolumeId()})
	requireCode(t, codes.AlreadyExists, err)
	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-2", SourceVolumeId: "pvc-none"})
	requireCode(t, codes.NotFound, err)
	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-2"})
	requireCode(t, codes.InvalidArgument, err)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("after"), 0o644))

	// A restore is at least the snapshot's size, and holds what the
	// volume held when it was taken.
	b, err := create("pvc-b", &csi.CapacityRange{RequiredBytes: 1024}, fromSnapshot(s.GetSnapshotId()))
	require.NoError(t, err)
	require.EqualValues(t, 1<<20, b.GetCapacityBytes())
	require.Equal(t, s.GetSnapshotId(), b.GetContentSource().GetSnapshot().GetSnapshotId())
	got, err := os.ReadFile(filepath.Join(c.store.dir, "volumes", "pvc-b", "sub", "f"))
	require.NoError(t, err)
	require.Equal(t, "before", string(got))
	_, err = create("pvc-b", &csi.CapacityRange{RequiredBytes: 1024}, nil)
	requireCode(t, codes.AlreadyExists, err)
	_, err = create("pvc-c", nil, fromSnapshot("snapshot-none"))
	requireCode(t, codes.NotFound, err)
	_, err = create("pvc-c", &csi.CapacityRange{LimitBytes: 1024}, fromSnapshot(s.GetSnapshotId()))
	requireCode(t, codes.OutOfRange, err)
	_, err = c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-c", VolumeCapabilities: []*csi.VolumeCapability{blockCap},
		VolumeContentSource: fromSnapshot(s.GetSnapshotId())})
	requireCode(t, codes.InvalidArgument, err)

	clone, err := create("pvc-clone", mib, fromVolume("pvc-a"))
	require.NoError(t, err)
	require.Equal(t, "pvc-a", clone.GetContentSource().GetVolume().GetVolumeId())
	got, err = os.ReadFile(filepath.Join(c.store.dir, "volumes", "pvc-clone", "sub", "f"))
	require.NoError(t, err)
	require.Equal(t, "after", string(got))

	_, err = c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-2", SourceVolumeId: "pvc-b"})
	require.NoError(t, err)
	list, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 2)
	list, err = c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SourceVolumeId: "pvc-b"})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 1)
	require.Equal(t, "snapshot-2", list.GetEntries()[0].GetSnapshot().GetSnapshotId())
	list, err = c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{SnapshotId: "snapshot-none"})
	require.NoError(t, err)
	require.Empty(t, list.GetEntries())
	page, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: 1})
	require.NoError(t, err)
	require.Len(t, page.GetEntries(), 1)
	require.Equal(t, "snapshot-1", page.GetEntries()[0].GetSnapshot().GetSnapshotId())
	page, err = c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{MaxEntries: 1, StartingToken: page.GetNextToken()})
	require.NoError(t, err)
	require.Len(t, page.GetEntries(), 1)
	require.Equal(t, "snapshot-2", page.GetEntries()[0].GetSnapshot().GetSnapshotId())
	require.Empty(t, page.GetNextToken())
	_, err = c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{StartingToken: "x"})
	requireCode(t, codes.Aborted, err)

	for range 2 {
		_, err = c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: "snapshot-1"})
		require.NoError(t, err, "deleting, and deleting again")
	}
	list, err = c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	require.NoError(t, err)
	require.Len(t, list.GetEntries(), 1)
	require.NoDirExists(t, filepath.Join(c.store.dir, "snapshots", "snapshot-1"))
	_, err = c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{})
	requireCode(t, codes.InvalidArgument, err)

	for _, id := range []string{"pvc-a", "pvc-a", "pvc-b", "pvc-clone", odd.GetVolumeId(), "pvc-none", "../snapshots/snapshot-2"} {
		_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
		require.NoError(t, err, id)
	}
	vols, err := c.store.list(volumes)
	require.NoError(t, err)
	require.Empty(t, vols)
	entries, err := os.ReadDir(filepath.Join(c.store.dir, "volumes"))
	require.NoError(t, err)
	require.Empty(t, entries, "the volumes' data")
	_, err = c.store.get(snapshots, "snapshot-2")
	require.NoError(t, err, "a snapshot outlives its volume")
}

// TestControllerBlock: a Block volume is a sparse file on a loop device;
// a snapshot holds what was written to the device, synced or not, and a
// restore larger than the snapshot is as large as asked.
func TestControllerBlock(t *testing.T) {
	prereq.Root(t, "loop devices")
	prereq.Commands(t, "util-linux", "losetup")
	ctx := t.Context()
	c := newController(t)
	caps := []*csi.VolumeCapability{blockCap}
	resp, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-disk", VolumeCapabilities: caps,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 4<<20 + 1}})
	require.NoError(t, err)
	v := resp.GetVolume()
	require.EqualValues(t, 4<<20+512, v.GetCapacityBytes(), "whole sectors")
	file := c.store.dataPath(volumes, v.GetVolumeId(), true)
	t.Cleanup(func() { _ = detachLoops(file) })
	devs, err := loopsOf(file)
	require.NoError(t, err)
	require.Len(t, devs, 1, "the volume's loop device")

	data := bytes.Repeat([]byte("vmop"), 1024)
	dev, err := os.OpenFile(devs[0], os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = dev.WriteAt(data, 1<<20)
	require.NoError(t, err)
	// Not synced: the snapshot must write it out itself.
	snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snapshot-disk", SourceVolumeId: v.GetVolumeId()})
	require.NoError(t, dev.Close())
	require.NoError(t, err)

	r, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-restored", VolumeCapabilities: caps,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 8 << 20}, VolumeContentSource: fromSnapshot(snap.GetSnapshot().GetSnapshotId())})
	require.NoError(t, err)
	restored := c.store.dataPath(volumes, r.GetVolume().GetVolumeId(), true)
	t.Cleanup(func() { _ = detachLoops(restored) })
	st, err := os.Stat(restored)
	require.NoError(t, err)
	require.EqualValues(t, 8<<20, st.Size())
	got := make([]byte, len(data))
	f, err := os.Open(restored)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.ReadAt(got, 1<<20)
	require.NoError(t, err)
	require.Equal(t, data, got)

	for _, id := range []string{v.GetVolumeId(), r.GetVolume().GetVolumeId()} {
		_, err = c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
		require.NoError(t, err)
	}
	devs, err = loopsOf(file)
	require.NoError(t, err)
	require.Empty(t, devs, "loop devices after the delete")
	require.NoFileExists(t, file)
}
