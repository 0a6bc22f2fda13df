package vmimport

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/diskimport"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/prereq"
)

// recorder is a Reporter that keeps what it was told.
type recorder struct {
	mu     sync.Mutex
	conds  []metav1.Condition
	events []runner.Event
}

func (r *recorder) SetImported(_ context.Context, c metav1.Condition) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.conds = append(r.conds, c)
	return nil
}

func (r *recorder) Event(_ context.Context, e runner.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) last() metav1.Condition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conds[len(r.conds)-1]
}

func (r *recorder) reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		out = append(out, e.Reason)
	}
	return out
}

// fixture is a VM config with one disk (a regular file) that names a raw
// image file as its source.
type fixture struct {
	image, disk string
	image2      string
	cfg         *runnerconfig.Config
	scratch     string
}

func newFixture(t *testing.T) *fixture {
	dir := t.TempDir()
	f := &fixture{
		image:   filepath.Join(dir, "image.raw"),
		image2:  filepath.Join(dir, "image2.raw"),
		disk:    filepath.Join(dir, "root-disk"),
		scratch: t.TempDir(),
	}
	for _, p := range []string{f.image, f.image2} {
		data := make([]byte, 4<<20)
		_, _ = rand.Read(data[:1<<20])
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	require.NoError(t, os.WriteFile(f.disk, nil, 0o644))
	require.NoError(t, os.Truncate(f.disk, 8<<20))
	f.cfg = &runnerconfig.Config{DataDir: filepath.Join(dir, "data"), VM: runnerconfig.VM{Name: "vm", Drives: []runnerconfig.Drive{
		{Type: runnerconfig.DriveRaw, Resource: f.disk, Source: &runnerconfig.DriveSource{File: f.image, Checksum: checksum(t, f.image)}},
		{Type: runnerconfig.DriveCDROM, File: "debian.iso"},
	}}}
	return f
}

func checksum(t *testing.T, path string) string {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (f *fixture) run(t *testing.T, rep *recorder) error {
	return Run(t.Context(), Options{Config: f.cfg, ScratchDir: f.scratch, Reporter: rep})
}

func (f *fixture) diskHead(t *testing.T) []byte {
	data, err := os.ReadFile(f.disk)
	require.NoError(t, err)
	return data[:4<<20]
}

func fileBytes(t *testing.T, path string) []byte {
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	return data
}

// TestRunOnce: the first run imports and records it; later runs leave the
// disk alone, also when the guest has written to it and when the source
// changed, which an event tells.
func TestRunOnce(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	f := newFixture(t)
	rep := &recorder{}
	require.NoError(t, f.run(t, rep))
	require.Equal(t, fileBytes(t, f.image), f.diskHead(t))
	c := rep.last()
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, v1.ReasonImported, c.Reason)
	require.Contains(t, c.Message, "disk root-disk: imported "+f.image+" (raw, 4Mi")
	require.Equal(t, []string{v1.ReasonImporting, v1.ReasonImported}, rep.reasons())
	rec, err := diskimport.ReadRecord(filepath.Join(f.cfg.DataDir, vmpod.ImportRecordDir), "root-disk")
	require.NoError(t, err)
	require.Equal(t, diskimport.StateDone, rec.State)

	// The guest writes; the VM starts again.
	guest := bytes.Repeat([]byte("guest"), 1000)
	df, err := os.OpenFile(f.disk, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = df.WriteAt(guest, 0)
	require.NoError(t, err)
	require.NoError(t, df.Close())
	rep = &recorder{}
	require.NoError(t, f.run(t, rep))
	require.Equal(t, guest, f.diskHead(t)[:len(guest)])
	require.Empty(t, rep.reasons())
	require.Empty(t, rep.conds, "the condition stays as the import left it")

	f.cfg.VM.Drives[0].Source = &runnerconfig.DriveSource{File: f.image2}
	rep = &recorder{}
	require.NoError(t, f.run(t, rep))
	require.Equal(t, guest, f.diskHead(t)[:len(guest)])
	require.Equal(t, []string{ReasonSourceChanged}, rep.reasons())
	require.Contains(t, rep.events[0].Message, "disk root-disk was imported from "+f.image)
}

// TestRunFilesystemClaim: a disk on a Filesystem claim starts as an empty
// directory; the import makes its sparse image file at the claim's size
// and records it under the disk's volume name.
func TestRunFilesystemClaim(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	f := newFixture(t)
	claim := filepath.Join(t.TempDir(), "root-disk")
	require.NoError(t, os.Mkdir(claim, 0o700))
	f.disk = filepath.Join(claim, vmpod.DiskFileName)
	f.cfg.VM.Drives[0].Resource, f.cfg.VM.Drives[0].ClaimSize = f.disk, 16<<20
	rep := &recorder{}
	require.NoError(t, f.run(t, rep))
	require.Equal(t, fileBytes(t, f.image), f.diskHead(t))
	fi, err := os.Stat(f.disk)
	require.NoError(t, err)
	require.EqualValues(t, 16<<20, fi.Size(), "the file has the claim's size")
	require.Contains(t, rep.last().Message, "disk root-disk: imported ")
	rec, err := diskimport.ReadRecord(filepath.Join(f.cfg.DataDir, vmpod.ImportRecordDir), "root-disk")
	require.NoError(t, err)
	require.Equal(t, diskimport.StateDone, rec.State)
}

// TestRunContainerDisk: a containerDisk's copy (made by vm-runner disk
// fetch) is imported under the image's name and removed after.
func TestRunContainerDisk(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	f := newFixture(t)
	const ref = "registry.example/disks/debian:13"
	f.cfg.VM.Drives[0].Source.ContainerDisk = ref
	rep := &recorder{}
	want := fileBytes(t, f.image)
	require.NoError(t, f.run(t, rep))
	require.Equal(t, want, f.diskHead(t))
	_, err := os.Stat(f.image)
	require.ErrorIs(t, err, os.ErrNotExist, "the copy is removed")
	require.Contains(t, rep.last().Message, "disk root-disk: imported "+ref+" (raw, 4Mi")
	rec, err := diskimport.ReadRecord(filepath.Join(f.cfg.DataDir, vmpod.ImportRecordDir), "root-disk")
	require.NoError(t, err)
	require.Equal(t, ref, rec.Source)
}

// TestRunHeldData: a disk with data and no record is kept.
func TestRunHeldData(t *testing.T) {
	f := newFixture(t)
	mine := []byte("a file system of someone's")
	require.NoError(t, os.WriteFile(f.disk, mine, 0o644))
	require.NoError(t, os.Truncate(f.disk, 8<<20))
	rep := &recorder{}
	require.NoError(t, f.run(t, rep))
	require.Equal(t, mine, f.diskHead(t)[:len(mine)])
	require.Equal(t, v1.ReasonDiskHeldData, rep.last().Reason)
	require.Equal(t, []string{v1.ReasonDiskHeldData}, rep.reasons())
}

// TestRunChecksumMismatch: the disk stays untouched, the condition and
// the error name the disk and the cause, and a run with the right
// checksum imports after all.
func TestRunChecksumMismatch(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	f := newFixture(t)
	right := f.cfg.VM.Drives[0].Source.Checksum
	f.cfg.VM.Drives[0].Source.Checksum = checksum(t, f.image2)
	rep := &recorder{}
	err := f.run(t, rep)
	require.ErrorContains(t, err, "disk root-disk: ")
	var mismatch *diskimport.ChecksumError
	require.ErrorAs(t, err, &mismatch)
	require.Equal(t, make([]byte, 8<<20), fileBytes(t, f.disk))
	c := rep.last()
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, "ChecksumMismatch", c.Reason)
	require.Contains(t, c.Message, "disk root-disk: ")
	require.Equal(t, []string{v1.ReasonImporting, v1.ReasonImportFailed}, rep.reasons())

	f.cfg.VM.Drives[0].Source.Checksum = right
	require.NoError(t, f.run(t, &recorder{}))
	require.Equal(t, fileBytes(t, f.image), f.diskHead(t))
}

// TestRunStandAlone: without a reporter the import still runs.
func TestRunStandAlone(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	f := newFixture(t)
	require.NoError(t, Run(t.Context(), Options{Config: f.cfg, ScratchDir: f.scratch}))
	require.Equal(t, fileBytes(t, f.image), f.diskHead(t))
}

// TestRunInterrupted: an import that was cut off (its record says
// Importing, the disk holds part of an image) is done again, from the
// source named now.
func TestRunInterrupted(t *testing.T) {
	prereq.Commands(t, "qemu-utils", "qemu-img")
	f := newFixture(t)
	records := filepath.Join(f.cfg.DataDir, vmpod.ImportRecordDir)
	require.NoError(t, os.MkdirAll(records, 0o755))
	require.NoError(t, diskimport.WriteRecord(records, diskimport.Record{Disk: "root-disk", Source: f.image2, State: diskimport.StateImporting}))
	df, err := os.OpenFile(f.disk, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = df.WriteAt(fileBytes(t, f.image2)[:1<<20], 0)
	require.NoError(t, err)
	require.NoError(t, df.Close())

	rep := &recorder{}
	require.NoError(t, f.run(t, rep))
	require.Equal(t, fileBytes(t, f.image), f.diskHead(t))
	require.Equal(t, v1.ReasonImported, rep.last().Reason)
}
