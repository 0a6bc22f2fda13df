package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/vmop/vmop/pkg/snapshotpush"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/runnerdata"
)

// Pushing a running VM's disks into a snapshot (vm-runner snapshot push,
// which kubectl vm snapshot runs in the VM's pod): qemu's backup jobs,
// started together, write a point-in-time copy of every disk to the
// snapshot pod's NBD server (pkg/vm-runner/snapshot.Serve) while the
// guest runs on; it is frozen through its agent only while the jobs
// start, so that the copy is consistent.

// pushRequest hands a push's start to the loop, which owns the freeze.
type pushRequest struct {
	req  snapshotpush.PushRequest
	done chan pushStart
}

// pushStart is a push whose jobs run.
type pushStart struct {
	mon  *qmp.Monitor
	jobs []string
	// disks names each job's disk by its volume name.
	disks  map[string]string
	nodes  []string
	tlsID  string
	pskDir string
	result snapshotpush.PushResult
	err    error
}

const (
	// pushOpenTimeout bounds the connection to a snapshot pod's export,
	// which may still be starting.
	pushOpenTimeout = 10 * time.Second
	// pushPoll is how often a push looks at its jobs.
	pushPoll  = 200 * time.Millisecond
	pushTLSID = "snapshot-tls"
)

// ReasonSnapshotTaken: the runner copied the VM's disks into a snapshot;
// ReasonSnapshotFailed (warning): it could not.
const (
	ReasonSnapshotTaken  = "SnapshotTaken"
	ReasonSnapshotFailed = "SnapshotFailed"
	actionSnapshot       = "Snapshot"
)

// diskNodes maps the disks' volume names to qemu's node names.
func (r *Runner) diskNodes() map[string]string {
	nodes := map[string]string{}
	for _, d := range r.machine.Disks {
		nodes[r.config.VM.Drives[d.Index].RecordName()] = d.ID
	}
	return nodes
}

// startPush, in the loop: connects to the exports, freezes the guest when
// it can, starts the jobs in one transaction, archives the runner data,
// and thaws.
func (r *Runner) startPush(ctx context.Context, req snapshotpush.PushRequest) (s pushStart) {
	if r.mon == nil || r.live == nil || r.live.stopping {
		s.err = errors.New("the VM is not running")
		return s
	}
	s.mon = r.mon
	nodes := r.diskNodes()
	psk, err := snapshotpush.ReadPSK(strings.NewReader(req.PSK))
	if err != nil {
		s.err = err
		return s
	}
	if s.pskDir, err = psk.WriteDir(r.runtimeDir); err != nil {
		s.err = err
		return s
	}
	defer func() {
		if s.err != nil {
			r.endPush(context.WithoutCancel(ctx), s)
		}
	}()
	if s.err = s.mon.Execute(ctx, "object-add", map[string]any{
		"qom-type": "tls-creds-psk", "id": pushTLSID, "endpoint": "client", "dir": s.pskDir, "username": psk.Identity,
	}, nil); s.err != nil {
		return s
	}
	s.tlsID = pushTLSID
	var actions []map[string]any
	for _, e := range req.Exports {
		id, ok := nodes[e.Disk]
		if !ok {
			s.err = fmt.Errorf("the VM has no disk %q", e.Disk)
			return s
		}
		target := "snapshot-" + id
		if s.err = s.mon.Execute(ctx, "blockdev-add", map[string]any{
			"driver": "nbd", "node-name": target, "export": e.Export, "tls-creds": pushTLSID,
			"server":       map[string]any{"type": "inet", "host": req.Host, "port": strconv.Itoa(e.Port)},
			"open-timeout": int(pushOpenTimeout.Seconds()),
			"discard":      "unmap", "detect-zeroes": "unmap",
		}, nil); s.err != nil {
			s.err = fmt.Errorf("connecting to the snapshot's export %s on %s:%d: %w", e.Export, req.Host, e.Port, s.err)
			return s
		}
		s.nodes = append(s.nodes, target)
		job := "snapshot-" + id
		if s.disks == nil {
			s.disks = map[string]string{}
		}
		s.disks[job] = e.Disk
		actions = append(actions, map[string]any{"type": "blockdev-backup", "data": map[string]any{
			"job-id": job, "device": id, "target": target, "sync": "full", "auto-dismiss": false,
		}})
		s.jobs = append(s.jobs, job)
	}

	s.result.Consistent, s.result.Why = r.freezeForPush(ctx)
	frozeAt := time.Now()
	var data bytes.Buffer
	s.err = runnerdata.Archive(r.dataDir, &data)
	if s.err == nil {
		s.err = s.mon.Execute(ctx, "transaction", map[string]any{"actions": actions}, nil)
	}
	if s.result.Consistent {
		s.result.FrozenSeconds = time.Since(frozeAt).Seconds()
		if _, err := r.thawGuest(ctx, ReasonThawed, "the snapshot's copy began"); err != nil {
			r.log.Error("Thawing after the snapshot's start", "err", err)
		}
	}
	if s.err != nil {
		s.jobs = nil
		return s
	}
	s.result.Data = data.Bytes()
	return s
}

// freezeForPush freezes the guest for the start of a push if it can, or
// says why the copy is crash-consistent.
func (r *Runner) freezeForPush(ctx context.Context) (bool, string) {
	if _, err := r.freezeGuest(ctx, time.Minute); err != nil {
		return false, err.Error()
	}
	return true, ""
}

// waitPush waits for the push's jobs to end, then ends the push; it
// returns the bytes they copied.
func (r *Runner) waitPush(ctx context.Context, s pushStart) (int64, error) {
	defer r.endPush(context.WithoutCancel(ctx), s)
	type job struct {
		ID       string `json:"id"`
		Status   string `json:"status"`
		Progress int64  `json:"current-progress"`
		Error    string `json:"error"`
	}
	mine := map[string]bool{}
	for _, id := range s.jobs {
		mine[id] = true
	}
	t := time.NewTicker(pushPoll)
	defer t.Stop()
	for {
		var jobs []job
		if err := s.mon.Execute(ctx, "query-jobs", nil, &jobs); err != nil {
			return 0, err
		}
		var copied int64
		done, errs := 0, []error{}
		for _, j := range jobs {
			if !mine[j.ID] {
				continue
			}
			copied += j.Progress
			if j.Status == "concluded" || j.Status == "null" {
				done++
				if j.Error != "" {
					errs = append(errs, fmt.Errorf("disk %s: %s", s.disks[j.ID], j.Error))
				}
			}
		}
		if done == len(s.jobs) {
			return copied, errors.Join(errs...)
		}
		select {
		case <-ctx.Done():
			return copied, ctx.Err()
		case <-t.C:
		}
	}
}

// endPush removes what a push added to qemu; the jobs' ends flush their
// targets, and removing a target closes its connection.
func (r *Runner) endPush(ctx context.Context, s pushStart) {
	if s.mon == nil {
		return
	}
	for _, id := range s.jobs {
		// A job still running (the push was given up) is cancelled first.
		_ = s.mon.Execute(ctx, "job-cancel", map[string]any{"id": id}, nil)
		_ = s.mon.Execute(ctx, "job-dismiss", map[string]any{"id": id}, nil)
	}
	for _, n := range s.nodes {
		if err := s.mon.Execute(ctx, "blockdev-del", map[string]any{"node-name": n}, nil); err != nil {
			r.log.Error("Removing a snapshot's target", "node", n, "err", err)
		}
	}
	if s.tlsID != "" {
		_ = s.mon.Execute(ctx, "object-del", map[string]any{"id": s.tlsID}, nil)
	}
	if s.pskDir != "" {
		os.RemoveAll(s.pskDir)
	}
}

// servePush answers POST /push: it starts the push in the loop and
// answers when the copy is whole, or failed.
func (r *Runner) servePush(w http.ResponseWriter, req *http.Request) {
	var p snapshotpush.PushRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 64<<10)).Decode(&p); err != nil {
		http.Error(w, "push: "+err.Error(), http.StatusBadRequest)
		return
	}
	if p.Host == "" || len(p.Exports) == 0 {
		http.Error(w, "push: a host and exports are required", http.StatusBadRequest)
		return
	}
	if !r.pushing.CompareAndSwap(false, true) {
		http.Error(w, "another snapshot of this VM is being taken", http.StatusConflict)
		return
	}
	defer r.pushing.Store(false)
	started := time.Now()
	pr := pushRequest{req: p, done: make(chan pushStart, 1)}
	ctx, cancel := context.WithTimeout(req.Context(), freezeWait+pushOpenTimeout*time.Duration(len(p.Exports))+time.Minute)
	st, err := askLoop(ctx, r.pushes, pr, pr.done)
	cancel()
	switch {
	case errors.Is(err, errLoopBusy):
		http.Error(w, "the runner is busy: try again", http.StatusServiceUnavailable)
		return
	case err != nil:
		// The loop may still start it: its answer ends it.
		go func() { r.endPush(context.Background(), <-pr.done) }()
		http.Error(w, "the runner did not answer in time", http.StatusServiceUnavailable)
		return
	case st.err != nil:
		r.pushEvent(req.Context(), p, snapshotpush.PushResult{}, st.err)
		http.Error(w, st.err.Error(), http.StatusInternalServerError)
		return
	}
	// Until the copy is whole; a client that goes away cancels it.
	res := st.result
	res.Bytes, err = r.waitPush(req.Context(), st)
	res.Seconds = time.Since(started).Seconds()
	r.pushEvent(context.WithoutCancel(req.Context()), p, res, err)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = json.NewEncoder(w).Encode(res)
}

// pushEvent tells the VM's events how a push ended.
func (r *Runner) pushEvent(ctx context.Context, p snapshotpush.PushRequest, res snapshotpush.PushResult, err error) {
	if err != nil {
		r.event(ctx, Event{Warning: true, Reason: ReasonSnapshotFailed, Action: actionSnapshot, Message: fmt.Sprintf(
			"Copying the disks into snapshot %s failed: %v", p.Snapshot, err)})
		return
	}
	how := fmt.Sprintf("consistent: the guest's file systems were frozen for %.2fs", res.FrozenSeconds)
	if !res.Consistent {
		how = "crash-consistent: " + res.Why
	}
	r.event(ctx, Event{Reason: ReasonSnapshotTaken, Action: actionSnapshot, Message: fmt.Sprintf(
		"Copied %d disks (%d MiB) into snapshot %s in %.1fs; %s", len(p.Exports), res.Bytes>>20, p.Snapshot, res.Seconds, how)})
}

// serveDisks answers GET /disks: the disks' volume names and sizes.
func (r *Runner) serveDisks(w http.ResponseWriter, req *http.Request) {
	type done = chan diskAnswer
	d := make(done, 1)
	ctx, cancel := context.WithTimeout(req.Context(), passwordWait)
	defer cancel()
	a, err := askLoop(ctx, r.diskQueries, d, d)
	if err == nil {
		err = a.err
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	_ = json.NewEncoder(w).Encode(a.disks)
}

type diskAnswer struct {
	disks []snapshotpush.DiskInfo
	err   error
}

// diskSizes, in the loop: the disks with the sizes qemu has of them.
func (r *Runner) diskSizes(ctx context.Context) ([]snapshotpush.DiskInfo, error) {
	if r.mon == nil {
		return nil, errors.New("the VM is not running")
	}
	var nodes []struct {
		NodeName string `json:"node-name"`
		Image    struct {
			VirtualSize int64 `json:"virtual-size"`
		} `json:"image"`
	}
	if err := r.mon.Execute(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &nodes); err != nil {
		return nil, err
	}
	size := map[string]int64{}
	for _, n := range nodes {
		size[n.NodeName] = n.Image.VirtualSize
	}
	var disks []snapshotpush.DiskInfo
	for _, d := range r.machine.Disks {
		disks = append(disks, snapshotpush.DiskInfo{Name: r.config.VM.Drives[d.Index].RecordName(), Size: size[d.ID]})
	}
	return disks, nil
}

// Disks asks the runner of the VM configured in configFile for its
// disks (vm-runner snapshot disks).
func Disks(ctx context.Context, configFile string) ([]snapshotpush.DiskInfo, error) {
	var disks []snapshotpush.DiskInfo
	return disks, callRunner(ctx, configFile, http.MethodGet, "/disks", nil, &disks)
}

// Push asks the runner of the VM configured in configFile to copy its
// disks into a snapshot (vm-runner snapshot push).
func Push(ctx context.Context, configFile string, p snapshotpush.PushRequest) (snapshotpush.PushResult, error) {
	var res snapshotpush.PushResult
	body, err := json.Marshal(p)
	if err != nil {
		return res, err
	}
	return res, callRunner(ctx, configFile, http.MethodPost, "/push", bytes.NewReader(body), &res)
}

// callRunner asks the runner and decodes its JSON answer into out; any
// other status is an error with the runner's words.
func callRunner(ctx context.Context, configFile, method, path string, body io.Reader, out any) error {
	resp, _, err := askRunner(ctx, configFile, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return errors.New(strings.TrimSpace(string(msg)))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("the runner's answer: %w", err)
	}
	return nil
}
