package runner

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
)

// TestDiskFullPausesAndResumes: a write to a full volume pauses the guest
// (qemu's werror=stop); the status and one warning name the disk and say
// what to do, the pod is not ready, and the runner lets the guest retry
// until the volume has room, then tells of the resume.
func TestDiskFullPausesAndResumes(t *testing.T) {
	c := baseConfig(t.TempDir())
	v := newTestVM(t, c)
	v.r.diskRetry, v.r.diskSettle = 50*time.Millisecond, 50*time.Millisecond
	v.run()
	require.True(t, v.r.ready.Load())

	v.q.fill("disk0")
	st := v.rec.waitStatus(t, "the disk's pause", func(s Status) bool { return s.DiskPause != nil })
	require.Equal(t, "disk0", st.DiskPause.Drive)
	require.Equal(t, "spec.vm.disks[0]", st.DiskPause.Field())
	require.True(t, st.DiskPause.NoSpace)
	e := v.rec.waitEvent(t, ReasonDiskFull, 1)
	require.True(t, e.Warning)
	require.Contains(t, e.Message, "The guest is paused: disk disk0 (spec.vm.disks[0]) is full (No space left on device). "+
		"To go on, free space on its volume or grow its claim")
	require.False(t, v.r.ready.Load(), "a paused guest's pod is not ready")
	require.Equal(t, e.Message, *v.r.paused.Load(), "what the readiness probe answers")
	// A snapshot's freeze says why it cannot be, at once: the agent of
	// a paused guest would not answer.
	f := freezeRequest{timeout: time.Minute, done: make(chan freezeResult, 1)}
	res, err := askLoop(t.Context(), v.r.freezes, f, f.done)
	require.NoError(t, err)
	require.ErrorIs(t, res.err, ErrPaused)
	require.ErrorContains(t, res.err, "disk disk0 (spec.vm.disks[0]) is full")

	// Retries fail while the volume is full: one warning, still paused.
	require.Eventually(t, func() bool { return countOf(v.q.commands(0), "cont") >= 3 }, waitTimeout, 10*time.Millisecond, "three retries")
	require.Len(t, v.rec.eventsOf(ReasonDiskFull), 1)
	require.NotNil(t, v.rec.last().DiskPause)

	v.q.free()
	v.rec.waitEvent(t, ReasonDiskResumed, 1)
	require.Nil(t, v.rec.last().DiskPause)
	require.True(t, v.r.ready.Load())
	require.Nil(t, v.r.paused.Load())
	require.Len(t, v.rec.eventsOf(ReasonDiskFull), 1)
}

// TestDiskFullMoves: a guest paused on one full disk, which then goes on
// and finds another full, is told of the second; the pause holds.
func TestDiskFullMoves(t *testing.T) {
	c := baseConfig(t.TempDir())
	c.VM.Drives = append(c.VM.Drives, runnerconfig.Drive{Type: runnerconfig.DriveRaw, File: filepath.Join(t.TempDir(), "data.img")})
	v := newTestVM(t, c)
	v.r.diskRetry, v.r.diskSettle = 50*time.Millisecond, 50*time.Millisecond
	v.run()

	v.q.fill("disk0")
	v.rec.waitEvent(t, ReasonDiskFull, 1)
	v.q.fillNext("disk1")
	e := v.rec.waitEvent(t, ReasonDiskFull, 2)
	require.Contains(t, e.Message, "The guest is paused: disk disk1 (spec.vm.disks[3]) is full")
	st := v.rec.last()
	require.NotNil(t, st.DiskPause)
	require.Equal(t, "disk1", st.DiskPause.Drive)
	require.Empty(t, v.rec.eventsOf(ReasonDiskResumed))

	v.q.free()
	require.Contains(t, v.rec.waitEvent(t, ReasonDiskResumed, 1).Message, "disk disk1 (spec.vm.disks[3]) takes its I/O again")
	require.Len(t, v.rec.eventsOf(ReasonDiskFull), 2)
}

func countOf(list []string, s string) int {
	n := 0
	for _, x := range list {
		if x == s {
			n++
		}
	}
	return n
}
