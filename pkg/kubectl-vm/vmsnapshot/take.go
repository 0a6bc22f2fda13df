package vmsnapshot

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/kubectl-vm/podexec"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/snapshotpush"
	"github.com/vmop/vmop/pkg/vmpod"
)

// Options are what taking and restoring snapshots need.
type Options struct {
	Client *vmclient.Client
	// Timeout bounds the wait for the snapshot pod to run.
	Timeout time.Duration
	// Log takes what is being done, a line each.
	Log io.Writer
}

// serveWait bounds the wait for the snapshot pod's NBD server.
const serveWait = time.Minute

// Take takes snapshot name of vm: online when it runs (its qemu copies
// the disks while the guest runs on), by a copy when it is stopped.
// Nothing is left of a snapshot that failed.
func Take(ctx context.Context, o Options, vm *vmclient.VM, name string) (*Snapshot, error) {
	sts := vm.StatefulSet
	if sts == nil {
		return nil, fmt.Errorf("vm %s/%s has no StatefulSet yet: the operator has not rendered it; try again in a moment", vm.Namespace, vm.Name)
	}
	pod, err := o.Client.Pod(ctx, vm)
	if err != nil {
		return nil, err
	}
	online := pod != nil
	switch {
	case online && (pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil):
		return nil, fmt.Errorf("vm %s/%s is starting or stopping (its pod %s is %s): take the snapshot when it runs or is stopped", vm.Namespace, vm.Name, pod.Name, pod.Status.Phase)
	case !online && ptr.Deref(sts.Spec.Replicas, 1) > 0:
		return nil, fmt.Errorf("vm %s/%s is starting (its StatefulSet wants a pod): take the snapshot when it runs or is stopped", vm.Namespace, vm.Name)
	}
	info := Info{VM: vm.Name, Name: name, Phase: PhaseInProgress}
	var sizes map[string]int64
	if online {
		if sizes, err = diskSizes(ctx, o.Client, pod); err != nil {
			return nil, fmt.Errorf("vm %s/%s: asking its runner for its disks: %w", vm.Namespace, vm.Name, err)
		}
	}
	claims := o.Client.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace)
	var sources []*corev1.PersistentVolumeClaim
	for _, d := range helperpod.Disks(sts) {
		c, err := claims.Get(ctx, helperpod.ClaimName(sts, d), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("vm %s/%s never ran: its disk %s has no claim (%s) yet, so there is nothing to snapshot", vm.Namespace, vm.Name, d, helperpod.ClaimName(sts, d))
		case err != nil:
			return nil, fmt.Errorf("vm %s/%s, disk %s: %w", vm.Namespace, vm.Name, d, o.Client.Explain(err))
		}
		sources = append(sources, c)
		block := c.Spec.VolumeMode == nil || *c.Spec.VolumeMode == corev1.PersistentVolumeBlock
		info.Disks = append(info.Disks, Disk{Name: d, Size: sizes[d], Block: block})
	}
	if len(info.Disks) == 0 {
		return nil, fmt.Errorf("vm %s/%s has no disk with a claim: nothing to snapshot", vm.Namespace, vm.Name)
	}
	classes, why := snapshotClasses(ctx, o.Client, sources)
	info.Kind = KindCSI
	if classes == nil {
		info.Kind = KindCopy
		fmt.Fprintf(o.Log, "copying the disks (no CSI snapshots: %s)\n", why)
	}
	for i := range info.Disks {
		d := &info.Disks[i]
		if info.Kind == KindCopy {
			d.Claim = ClaimName(vm.Name, name, d.Name)
			continue
		}
		d.VolumeSnapshot = ClaimName(vm.Name, name, d.Name)
		d.StorageClass = ptr.Deref(sources[i].Spec.StorageClassName, "")
		d.AccessModes = sources[i].Spec.AccessModes
	}
	// The manifest is the VirtualMachine, or in GitOps mode the
	// StatefulSet.
	stsYAML, err := statefulSetOf(vm)
	if err != nil {
		return nil, err
	}
	manifest := stsYAML
	if vm.Object != nil {
		if manifest, err = cleanYAML(vm.Object.DeepCopy().Object); err != nil {
			return nil, err
		}
	}
	secret, err := NewSecret(vm.Namespace, info, manifest)
	if err != nil {
		return nil, err
	}
	secret.Data[KeyStatefulSet] = stsYAML
	helper, err := o.helper(vm, info, sources, online)
	if err != nil {
		return nil, err
	}
	if helper != nil {
		if err := helperpod.NoOther(ctx, o.Client, helper, "snapshot or restore"); err != nil {
			return nil, err
		}
	}
	secrets := o.Client.Kube.CoreV1().Secrets(vm.Namespace)
	if secret, err = secrets.Create(ctx, secret, metav1.CreateOptions{FieldManager: vmclient.FieldManager}); err != nil {
		return nil, fmt.Errorf("snapshot %s of vm %s/%s: %w", name, vm.Namespace, vm.Name, o.Client.Explain(err))
	}
	snap := &Snapshot{Secret: secret, Info: info}
	if info.Kind == KindCSI {
		err = o.takeCSI(ctx, snap, pod, helper, sources, classes)
	} else {
		err = o.take(ctx, vm, snap, pod, helper, sources)
	}
	if err != nil {
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if derr := Delete(cleanup, o.Client, secret); derr != nil {
			err = errors.Join(err, fmt.Errorf("deleting the failed snapshot: %w; delete secret %s yourself", derr, secret.Name))
		}
		// At once: the garbage collector would, in its time.
		for _, d := range info.Disks {
			if d.Claim == "" {
				continue
			}
			if derr := claims.Delete(cleanup, d.Claim, metav1.DeleteOptions{}); derr != nil && !apierrors.IsNotFound(derr) {
				err = errors.Join(err, fmt.Errorf("deleting claim %s of the failed snapshot: %w", d.Claim, o.Client.Explain(derr)))
			}
		}
		err = errors.Join(err, deleteVolumeSnapshots(cleanup, o.Client, snap))
		return nil, fmt.Errorf("snapshot %s of vm %s/%s: %w", name, vm.Namespace, vm.Name, err)
	}
	return snap, nil
}

// helper is the snapshot pod of a snapshot: it holds the copies' claims
// (KindCopy) and, when the VM is stopped, the VM's claims and its runner
// data's; nil when it has nothing to do (a CSI snapshot of a running VM,
// whose pod archives its runner data).
func (o Options) helper(vm *vmclient.VM, info Info, sources []*corev1.PersistentVolumeClaim, online bool) (*corev1.Pod, error) {
	if online && info.Kind == KindCSI {
		return nil, nil
	}
	var vmClaims []string
	dataClaim := ""
	if !online {
		if info.Kind == KindCopy {
			for _, c := range sources {
				vmClaims = append(vmClaims, c.Name)
			}
		}
		dataClaim = helperpod.ClaimName(vm.StatefulSet, render.VolumeRunnerData)
	}
	return helperpod.New(vm.StatefulSet, PodName(vm.Name), Component, podVolumes(info, vmClaims, dataClaim))
}

// take makes the snapshot's claims, copies the disks into them through
// the snapshot pod, and marks the snapshot Ready.
func (o Options) take(ctx context.Context, vm *vmclient.VM, snap *Snapshot, vmPod, helper *corev1.Pod, sources []*corev1.PersistentVolumeClaim) error {
	claims := o.Client.Kube.CoreV1().PersistentVolumeClaims(vm.Namespace)
	for i, d := range snap.Info.Disks {
		c := copyClaim(sources[i], d.Claim, snap.Secret)
		if _, err := claims.Create(ctx, c, metav1.CreateOptions{FieldManager: vmclient.FieldManager}); err != nil {
			return o.Client.Explain(err)
		}
	}
	started := time.Now()
	var data []byte
	err := helperpod.Run(ctx, o.Client, helper, "snapshot", o.Timeout, o.Log, func(helper *corev1.Pod) error {
		var err error
		if vmPod != nil {
			data, err = o.push(ctx, snap, vmPod, helper)
		} else {
			data, err = o.copyStopped(ctx, snap, helper)
		}
		return err
	})
	if err != nil {
		return err
	}
	snap.Info.Seconds = time.Since(started).Seconds()
	return o.markReady(ctx, snap, data)
}

// markReady writes the taken snapshot's Info and runner data.
func (o Options) markReady(ctx context.Context, snap *Snapshot, data []byte) error {
	snap.Info.Phase = PhaseReady
	s := snap.Secret.DeepCopy()
	s.Data[KeyRunnerData] = data
	if err := SetInfo(s, snap.Info); err != nil {
		return err
	}
	s, err := o.Client.Kube.CoreV1().Secrets(s.Namespace).Update(ctx, s, metav1.UpdateOptions{FieldManager: vmclient.FieldManager})
	if err != nil {
		return o.Client.Explain(err)
	}
	snap.Secret = s
	return nil
}

// push has the VM's qemu copy its disks to the snapshot pod's NBD
// server while the guest runs; it returns the runner data's archive.
func (o Options) push(ctx context.Context, snap *Snapshot, vmPod, helper *corev1.Pod) ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	psk := snapshotpush.PSK{Identity: "vmop", Key: hex.EncodeToString(key)}
	serve := []string{"vm-runner", "snapshot", "serve"}
	push := []string{"vm-runner", "snapshot", "push", "--snapshot", snap.Info.Name, "--host", helper.Status.PodIP}
	for i, d := range snap.Info.Disks {
		p := diskPath(helperVolume(i), d.Block)
		serve = append(serve, "--export", fmt.Sprintf("%s=%s:%d", d.Name, p, d.Size))
		push = append(push, "--export", fmt.Sprintf("%s=%s:%d", d.Name, d.Name, snapshotpush.FirstPort+i))
	}
	// The server runs until its stdin ends.
	stdin, keep := io.Pipe()
	served := make(chan error, 1)
	ready := make(chan struct{})
	out, lines := io.Pipe()
	var stderr bytes.Buffer
	go func() {
		served <- podexec.Exec(ctx, o.Client.Config, helper, serve, podexec.Streams{Stdin: stdin, Stdout: lines, Stderr: &stderr})
		lines.Close()
	}()
	go func() {
		n := 0
		for sc := bufio.NewScanner(out); sc.Scan(); {
			if strings.HasPrefix(sc.Text(), "serving ") {
				if n++; n == len(snap.Info.Disks) {
					close(ready)
				}
			}
		}
	}()
	defer keep.Close()
	if _, err := io.WriteString(keep, psk.String()+"\n"); err != nil {
		return nil, err
	}
	select {
	case <-ready:
	case err := <-served:
		return nil, execError("the snapshot pod's NBD server", err, stderr.String())
	case <-time.After(serveWait):
		return nil, fmt.Errorf("the snapshot pod's NBD server did not start within %s", serveWait)
	}
	fmt.Fprintf(o.Log, "copying %d disks while the guest runs\n", len(snap.Info.Disks))
	var res snapshotpush.PushResult
	var pushOut, pushErr bytes.Buffer
	err := podexec.Exec(ctx, o.Client.Config, vmPod, push, podexec.Streams{Stdin: strings.NewReader(psk.String() + "\n"), Stdout: &pushOut, Stderr: &pushErr})
	keep.Close()
	serveErr := <-served
	if err != nil {
		return nil, execError("the VM's runner", err, pushErr.String())
	}
	if err := json.Unmarshal(pushOut.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("the VM's runner's answer: %w", err)
	}
	if serveErr != nil {
		return nil, execError("the snapshot pod's NBD server", serveErr, stderr.String())
	}
	snap.Info.Consistency, snap.Info.Why = Consistent, ""
	if !res.Consistent {
		snap.Info.Consistency, snap.Info.Why = CrashConsistent, res.Why
	}
	snap.Info.FrozenSeconds, snap.Info.Bytes = res.FrozenSeconds, res.Bytes
	return res.Data, nil
}

// copyStopped copies the stopped VM's disks and runner data in the
// snapshot pod.
func (o Options) copyStopped(ctx context.Context, snap *Snapshot, helper *corev1.Pod) ([]byte, error) {
	for i := range snap.Info.Disks {
		d := &snap.Info.Disks[i]
		fmt.Fprintf(o.Log, "copying disk %s\n", d.Name)
		n, err := o.copyDisk(ctx, helper, diskPath(vmVolume(i), d.Block), diskPath(helperVolume(i), d.Block), 0)
		if err != nil {
			return nil, fmt.Errorf("disk %s: %w", d.Name, err)
		}
		d.Size = n
		snap.Info.Bytes += n
	}
	snap.Info.Consistency = Stopped
	return o.archive(ctx, helper)
}

// copyDisk copies size bytes (all when 0) from one path of the pod to
// another, and returns how many.
func (o Options) copyDisk(ctx context.Context, helper *corev1.Pod, from, to string, size int64) (int64, error) {
	out, err := runIn(ctx, o.Client, helper, "the copy", nil, "snapshot", "copy", "--from", from, "--to", to, "--size", strconv.FormatInt(size, 10))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
}

// diskSizes asks the VM's runner for its disks' sizes.
func diskSizes(ctx context.Context, c *vmclient.Client, pod *corev1.Pod) (map[string]int64, error) {
	out, err := runIn(ctx, c, pod, "vm-runner snapshot disks", nil, "snapshot", "disks")
	if err != nil {
		return nil, err
	}
	var disks []snapshotpush.DiskInfo
	if err := json.Unmarshal(out, &disks); err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, d := range disks {
		sizes[d.Name] = d.Size
	}
	return sizes, nil
}

// runIn runs the vm-runner command cmd in pod with stdin (may be nil) and
// returns what it printed; its failure says what failed, in the
// command's own words.
func runIn(ctx context.Context, c *vmclient.Client, pod *corev1.Pod, what string, stdin io.Reader, cmd ...string) ([]byte, error) {
	var out, stderr bytes.Buffer
	if err := podexec.Exec(ctx, c.Config, pod, append([]string{"vm-runner"}, cmd...), podexec.Streams{Stdin: stdin, Stdout: &out, Stderr: &stderr}); err != nil {
		return nil, execError(what, err, stderr.String())
	}
	return out.Bytes(), nil
}

// execError is a command's failure in a pod, in its own words.
func execError(what string, err error, stderr string) error {
	var exit *podexec.ExitError
	said := strings.TrimSpace(stderr)
	if i := strings.LastIndex(said, "\n"); i >= 0 {
		said = said[i+1:]
	}
	if errors.As(err, &exit) && said != "" {
		return fmt.Errorf("%s: %s", what, strings.TrimPrefix(said, "Error: "))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// The snapshot pod's volumes: helperVolume(i) the snapshot's claim of
// disk i, vmVolume(i) the VM's.
func helperVolume(i int) string { return "snapshot-" + strconv.Itoa(i) }
func vmVolume(i int) string     { return "disk-" + strconv.Itoa(i) }

// diskPath is where the pod has a disk on volume: a Block claim's
// device, or a Filesystem claim's image file.
func diskPath(volume string, block bool) string {
	if block {
		return "/dev/" + volume
	}
	return runnerconfig.DiskFile(volume)
}

// podVolumes are the snapshot pod's volumes: the snapshot's claims (of
// copies), the VM's vmClaims and, with dataClaim, its runner data's.
func podVolumes(info Info, vmClaims []string, dataClaim string) []helperpod.Volume {
	var vols []helperpod.Volume
	add := func(name, claim string, block bool) {
		p := diskPath(name, block)
		if !block {
			p = path.Dir(p)
		}
		vols = append(vols, helperpod.Volume{Name: name, Claim: claim, Path: p, Block: block})
	}
	for i, d := range info.Disks {
		if d.Claim != "" {
			add(helperVolume(i), d.Claim, d.Block)
		}
		if i < len(vmClaims) {
			add(vmVolume(i), vmClaims[i], d.Block)
		}
	}
	if dataClaim != "" {
		vols = append(vols, helperpod.Volume{Name: render.VolumeRunnerData, Claim: dataClaim, Path: vmpod.DataDir})
	}
	return vols
}

// copyClaim is a claim like the VM's claim from, called name, owned by
// the snapshot: the same class, mode and access, as large as from is,
// and no selector (which picked from's volume).
func copyClaim(from *corev1.PersistentVolumeClaim, name string, owner *corev1.Secret) *corev1.PersistentVolumeClaim {
	size := from.Spec.Resources.Requests[corev1.ResourceStorage]
	if got, ok := from.Status.Capacity[corev1.ResourceStorage]; ok && got.Cmp(size) > 0 {
		size = got
	}
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: from.Namespace,
			Labels:          owner.Labels,
			OwnerReferences: OwnedBy(owner),
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      from.Spec.AccessModes,
			StorageClassName: from.Spec.StorageClassName,
			VolumeMode:       from.Spec.VolumeMode,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// statefulSetOf is the VM's StatefulSet without what the cluster adds:
// what a clone of a deleted VM is placed by.
func statefulSetOf(vm *vmclient.VM) ([]byte, error) {
	b, err := json.Marshal(vm.StatefulSet)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := json.Unmarshal(b, &obj); err != nil {
		return nil, err
	}
	obj["apiVersion"], obj["kind"] = "apps/v1", "StatefulSet"
	return cleanYAML(obj)
}

// cleanYAML is obj as YAML, without its status and the metadata the
// cluster sets.
func cleanYAML(obj map[string]any) ([]byte, error) {
	delete(obj, "status")
	for _, f := range []string{"managedFields", "resourceVersion", "uid", "creationTimestamp", "generation", "ownerReferences"} {
		unstructured.RemoveNestedField(obj, "metadata", f)
	}
	return yaml.Marshal(obj)
}
