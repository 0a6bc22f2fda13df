package runner_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/snapshotpush"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runnerdata"
	"github.com/vmop/vmop/pkg/vm-runner/snapshot"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/testguest"
)

// TestSnapshotPush: vm-runner snapshot push with the real qemu and
// qemu-nbd, as kubectl vm snapshot runs them in the VM's pod and the
// snapshot pod: while the guest writes synced records, the copy holds
// every record acknowledged before the freeze and none begun after the
// thaw (a point in time), the guest went on writing, and the runner data
// is in the result.
func TestSnapshotPush(t *testing.T) {
	dir := t.TempDir()
	first, records := filepath.Join(dir, "first.img"), filepath.Join(dir, "records.img")
	const size = 8 << 20
	for _, f := range []string{first, records} {
		require.NoError(t, os.WriteFile(f, nil, 0o600))
		require.NoError(t, os.Truncate(f, size))
	}
	cfg := guestVM + "drives:\n- type: raw\n  resource: " + first + "\n- type: raw\n  resource: " + records + "\n"
	v := newGuestVM(t, cfg, testguest.Agent, testguest.Records(100), testguest.RecordPause(100*time.Millisecond))
	rec := &eventRecorder{}
	result, stop := v.runInProcess(rec)
	defer func() {
		stop()
		require.NoError(t, <-result)
	}()
	rec.wait(t, runner.ReasonBooted)
	v.waitConsole(testguest.RecordPrefix+"5", 2*time.Minute)

	disks, err := runner.Disks(t.Context(), v.config)
	require.NoError(t, err)
	require.Equal(t, []snapshotpush.DiskInfo{{Name: "first.img", Size: size}, {Name: "records.img", Size: size}}, disks)

	key := make([]byte, 32)
	_, _ = rand.Read(key)
	psk := snapshotpush.PSK{Identity: "snap", Key: hex.EncodeToString(key)}
	copies := []string{filepath.Join(dir, "first-copy.img"), filepath.Join(dir, "records-copy.img")}
	srv := snapshot.Server{Address: "127.0.0.1", PSK: psk, Log: &bytes.Buffer{}}
	req := snapshotpush.PushRequest{Snapshot: "s1", Host: "127.0.0.1", PSK: psk.String()}
	for i, d := range disks {
		e := snapshot.Export{Name: d.Name, Path: copies[i], Size: d.Size, Port: freeport.Get(t)}
		srv.Exports = append(srv.Exports, e)
		req.Exports = append(req.Exports, snapshotpush.PushExport{Disk: d.Name, Export: e.Name, Port: e.Port})
	}
	stopServe, served := make(chan struct{}), make(chan error, 1)
	go func() { served <- srv.Serve(t.Context(), stopServe) }()

	// A wrong key connects nowhere.
	wrong := req
	wrong.PSK = "snap:" + strings.Repeat("00", 32)
	_, err = runner.Push(t.Context(), v.config, wrong)
	require.Error(t, err)
	require.Equal(t, runner.ReasonSnapshotFailed, rec.wait(t, runner.ReasonSnapshotFailed).Reason)

	res, err := runner.Push(t.Context(), v.config, req)
	require.NoError(t, err)
	close(stopServe)
	require.NoError(t, <-served)
	require.True(t, res.Consistent, res.Why)
	require.Positive(t, res.FrozenSeconds)
	require.EqualValues(t, 2*size, res.Bytes)
	require.Regexp(t, `^Copied 2 disks \(16 MiB\) into snapshot s1 in [0-9.]+s; consistent: the guest's file systems were frozen for [0-9.]+s$`,
		rec.wait(t, runner.ReasonSnapshotTaken).Message)

	// The point in time: between the freeze and the thaw.
	console := v.consoleText()
	frozeAt := strings.Index(console, testguest.FrozenLine)
	thawedAt := strings.Index(console, testguest.ThawedLine)
	require.Positive(t, frozeAt)
	require.Greater(t, thawedAt, frozeAt)
	before, after := testguest.AckedRecords(console[:frozeAt]), testguest.AckedRecords(console[:thawedAt])+2
	c, err := os.Open(copies[1])
	require.NoError(t, err)
	defer c.Close()
	lost, err := testguest.LostRecords(c, before)
	require.NoError(t, err)
	require.Empty(t, lost, "records acknowledged before the freeze")
	lost, err = testguest.LostRecords(c, after)
	require.NoError(t, err)
	require.Contains(t, lost, after, "a record written after the thaw is in the copy")
	// The guest went on.
	v.waitConsole(testguest.RecordPrefix+strconv.Itoa(after+2), time.Minute)

	// The runner data as it was.
	extracted := t.TempDir()
	require.NoError(t, runnerdata.Extract(bytes.NewReader(res.Data), extracted))
	uuid, err := os.ReadFile(filepath.Join(extracted, "uuid.txt"))
	require.NoError(t, err)
	require.Len(t, strings.TrimSpace(string(uuid)), 36)
}
