package diskupload_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerexec"
	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
	"github.com/vmop/vmop/pkg/vm-runner/diskupload"
	"github.com/vmop/vmop/test/harness/prereq"
)

const (
	imageSize  = 4 << 20
	deviceSize = 8 << 20
)

// setup makes a device (a regular file of zeros), the record and scratch
// directories, and a raw image with random data at both ends.
func setup(t *testing.T) (diskupload.Options, []byte) {
	t.Helper()
	dir := t.TempDir()
	device := filepath.Join(dir, "device")
	require.NoError(t, os.WriteFile(device, nil, 0o644))
	require.NoError(t, os.Truncate(device, deviceSize))
	o := diskupload.Options{Disk: "root-disk", Device: device, RecordDir: filepath.Join(dir, "records"), ScratchDir: filepath.Join(dir, "scratch"), Name: "root.raw"}
	require.NoError(t, os.Mkdir(o.ScratchDir, 0o755))
	image := make([]byte, imageSize)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, r := range [][2]int{{0, 70000}, {imageSize - 5000, imageSize}} {
		for i := r[0]; i < r[1]; i++ {
			image[i] = byte(rng.UintN(256))
		}
	}
	return o, image
}

func receive(t *testing.T, o diskupload.Options, image []byte) error {
	t.Helper()
	o.Size = int64(len(image))
	return diskupload.Receive(t.Context(), bytes.NewReader(image), o)
}

// requireDevice checks that the device holds image, then zeros.
func requireDevice(t *testing.T, o diskupload.Options, image []byte) {
	t.Helper()
	got, err := os.ReadFile(o.Device)
	require.NoError(t, err)
	require.Len(t, got, deviceSize)
	require.True(t, bytes.Equal(image, got[:len(image)]), "the device starts with the image")
	require.True(t, bytes.Equal(make([]byte, deviceSize-len(image)), got[len(image):]), "zeros after it")
}

func TestFresh(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	o, image := setup(t)
	var lines bytes.Buffer
	o.Progress = &lines
	require.NoError(t, receive(t, o, image))
	requireDevice(t, o, image)
	rec, err := diskimport.ReadRecord(o.RecordDir, o.Disk)
	require.NoError(t, err)
	require.Equal(t, diskimport.StateDone, rec.State)
	require.Equal(t, "upload:root.raw", rec.Source)
	require.Equal(t, "raw", rec.Format)
	require.Equal(t, int64(imageSize), rec.VirtualSize)
	require.True(t, strings.HasPrefix(rec.Checksum, "sha256:"), rec.Checksum)
	require.False(t, rec.Finished.Before(rec.Started))

	last := lines.String()[strings.LastIndex(strings.TrimSuffix(lines.String(), "\n"), "\n")+1:]
	phase, done, total, ok := runnerexec.ParseProgress(strings.TrimSpace(last))
	require.True(t, ok, "the last line is progress: %q", lines.String())
	require.Equal(t, "converting", phase)
	require.Equal(t, int64(imageSize), done)
	require.Equal(t, int64(imageSize), total)
	require.NotContains(t, lines.String(), "downloading", "the plugin counts what it sends")
}

// TestFilesystemClaim: on a Filesystem claim the receiver makes the
// disk's image file at the claim's size, then fills it.
func TestFilesystemClaim(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	o, image := setup(t)
	o.Device = filepath.Join(t.TempDir(), "disk.img")
	o.ClaimSize = deviceSize
	require.NoError(t, diskupload.Check(o))
	require.NoError(t, receive(t, o, image))
	requireDevice(t, o, image)
}

func TestDoneNeedsForce(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	o, image := setup(t)
	require.NoError(t, receive(t, o, image))
	other := bytes.Repeat([]byte{7}, 1<<20)

	require.ErrorAs(t, diskupload.Check(o), new(*diskupload.NeedsForceError))
	in := bytes.NewReader(other)
	o.Size = int64(len(other))
	err := diskupload.Receive(t.Context(), in, o)
	require.Zero(t, in.Len(), "a refusal reads all of stdin: an exec never ends with stdin unread")
	var nf *diskupload.NeedsForceError
	require.ErrorAs(t, err, &nf)
	require.ErrorContains(t, err, "disk root-disk holds data (filled from upload:root.raw at ")
	require.ErrorContains(t, err, "--force overwrites it")
	requireDevice(t, o, image)

	o.Force = true
	require.NoError(t, diskupload.Check(o))
	o.Name = "other.raw"
	require.NoError(t, receive(t, o, other))
	requireDevice(t, o, append(other, image[len(other):]...))
	rec, err := diskimport.ReadRecord(o.RecordDir, o.Disk)
	require.NoError(t, err)
	require.Equal(t, "upload:other.raw", rec.Source)
	require.Equal(t, diskimport.StateDone, rec.State)
}

func TestHeldDataNeedsForce(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	o, image := setup(t)
	// Data that no upload wrote: a boot sector.
	f, err := os.OpenFile(o.Device, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{0x55, 0xaa}, 510)
	require.NoError(t, err)
	require.NoError(t, f.Close())

	err = receive(t, o, image)
	require.ErrorAs(t, err, new(*diskupload.NeedsForceError))
	require.EqualError(t, err, "disk root-disk holds data (it is not empty, and no upload or import wrote it); --force overwrites it")
	rec, err := diskimport.ReadRecord(o.RecordDir, o.Disk)
	require.NoError(t, err)
	require.Nil(t, rec, "no record: nothing was written")

	o.Force = true
	require.NoError(t, receive(t, o, image))
	requireDevice(t, o, image)
}

// TestInterruptedRerun: an upload cut off after it began writing leaves
// its record Importing and data on the disk; the next one writes without
// --force.
func TestInterruptedRerun(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	o, image := setup(t)
	o.Size = imageSize
	err := diskupload.Receive(t.Context(), bytes.NewReader(image[:imageSize/2]), o)
	require.ErrorContains(t, err, "the upload ended 2097152 bytes short")
	rec, err := diskimport.ReadRecord(o.RecordDir, o.Disk)
	require.NoError(t, err)
	require.Equal(t, diskimport.StateImporting, rec.State, "a cut-off stream is never converted")
	empty, err := diskimport.Empty(o.Device)
	require.NoError(t, err)
	require.True(t, empty)

	// As if the conversion had been cut off: some of the image written.
	require.NoError(t, os.WriteFile(o.Device, image[:1<<20], 0o644))
	require.NoError(t, os.Truncate(o.Device, deviceSize))
	require.NoError(t, receive(t, o, image))
	requireDevice(t, o, image)
}

func TestCancelled(t *testing.T) {
	o, image := setup(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	o.Size = imageSize
	err := diskupload.Receive(ctx, bytes.NewReader(image), o)
	require.ErrorIs(t, err, context.Canceled)
	rec, err := diskimport.ReadRecord(o.RecordDir, o.Disk)
	require.NoError(t, err)
	require.Equal(t, diskimport.StateImporting, rec.State)
}
