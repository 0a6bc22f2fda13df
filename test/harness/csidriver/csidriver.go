// Package csidriver is a CSI driver for tests only, never shipped: it
// gives the test node (test/harness/testnode) volumes that the real
// Kubernetes snapshot machinery can snapshot and restore. Start runs it in
// the test process with upstream's snapshot-controller, csi-snapshotter
// and csi-provisioner (built by hack/build-csi.sh) as the cluster's
// processes, registers it with the node's kubelet through the plugin
// watcher, as node-driver-registrar would, and makes the StorageClass
// and VolumeSnapshotClass to use it.
//
// A volume is a sparse file on a loop device (Block) or a directory
// (Filesystem) in the node's directory; a snapshot is a sparse copy of it,
// taken when asked; a volume from a snapshot or another volume is a copy
// too. Everything is below the node's directory, so what a killed run
// leaves (mounts, loop devices) the node's next Start removes.
package csidriver

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/testnode"
)

const (
	// DriverName is the driver's name: its CSIDriver's, its
	// StorageClass's provisioner and its VolumeSnapshotClass's driver.
	DriverName = "csi.vmop.test"
	// StorageClass is the class of the driver's volumes. Its binding is
	// Immediate: the node is the only one, the driver has no topology,
	// and a claim (a restored one too) is provisioned and Bound before
	// any pod uses it, which a test can wait for. WaitForFirstConsumer
	// would work too (csi-provisioner then waits for the scheduler's
	// selected-node annotation) but hold claims Pending until a pod
	// comes.
	StorageClass = "csi-snap"
	// SnapshotClass is the VolumeSnapshotClass of the driver, the
	// default one: snapshots that name no class get it.
	SnapshotClass = "csi-snap"
)

// SnapshotGroup is the API group of VolumeSnapshots and their classes
// and contents, whose CRDs Start installs.
const SnapshotGroup = "snapshot.storage.k8s.io"

// The resources of SnapshotGroup, for a dynamic client.
var (
	VolumeSnapshots        = schema.GroupVersionResource{Group: SnapshotGroup, Version: "v1", Resource: "volumesnapshots"}
	VolumeSnapshotContents = schema.GroupVersionResource{Group: SnapshotGroup, Version: "v1", Resource: "volumesnapshotcontents"}
	VolumeSnapshotClasses  = schema.GroupVersionResource{Group: SnapshotGroup, Version: "v1", Resource: "volumesnapshotclasses"}
)

// Driver is the running driver and its sidecars.
type Driver struct {
	// Dir holds the volumes and snapshots (see VolumePath).
	Dir string
	// Endpoint is the CSI socket, which the kubelet and the sidecars
	// dial.
	Endpoint string
	// Log is the driver's log: every CSI call and its result.
	Log string
	// The sidecars, among the node's cluster's processes too (whose logs
	// the node tests print when they fail).
	SnapshotController, Snapshotter, Provisioner *testcluster.Process

	node         *testnode.Node
	registry     string // the registration socket
	reg          *registration
	csiServer    *grpc.Server
	regServer    *grpc.Server
	nodeService  *node
	store        *store
	logFile      *os.File
	stopOnce     sync.Once
	stopErr      error
	serveStopped sync.WaitGroup
}

// startTimeout bounds the wait for the kubelet's registration.
const startTimeout = 2 * time.Minute

// Start builds the sidecars (hack/build-csi.sh: minutes on a machine's
// first run, at once later), installs the VolumeSnapshot CRDs, runs the
// driver and the sidecars, makes the classes, and waits until the
// kubelet has registered the driver (the node's CSINode lists it). It may
// run again on a node after Stop: what it made in the cluster is reused.
func Start(ctx context.Context, n *testnode.Node) (d *Driver, err error) {
	bins, err := build(ctx)
	if err != nil {
		return nil, err
	}
	d = &Driver{
		node:     n,
		Dir:      n.StorageDir(DriverName),
		Endpoint: filepath.Join(n.KubeletRootDir(), "plugins", DriverName, "csi.sock"),
		registry: filepath.Join(n.KubeletRootDir(), "plugins_registry", DriverName+"-reg.sock"),
		Log:      filepath.Join(n.Cluster.Dir, "csi-driver.log"),
	}
	defer func() {
		if err != nil {
			if serr := d.Stop(); serr != nil {
				err = fmt.Errorf("%w (and stopping: %v)", err, serr)
			}
			d = nil
		}
	}()
	if err = installCRDs(ctx, n, filepath.Join(bins, "crd")); err != nil {
		return d, err
	}
	if err = createDriverObject(ctx, n); err != nil {
		return d, err
	}
	if err = d.serve(); err != nil {
		return d, err
	}
	if err = d.startSidecars(bins); err != nil {
		return d, err
	}
	if err = createClasses(ctx, n); err != nil {
		return d, err
	}
	return d, d.waitRegistered(ctx)
}

// build runs hack/build-csi.sh and returns its directory.
func build(ctx context.Context) (string, error) {
	module, err := testcluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(module, "hack", "build-csi.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/build-csi.sh: %w", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) == 0 {
		return "", errors.New("hack/build-csi.sh printed no directory")
	}
	return lines[len(lines)-1], nil
}

// installCRDs installs the CRDs of VolumeSnapshots, their classes and
// contents (not the group snapshots': that feature is off in the
// sidecars).
func installCRDs(ctx context.Context, n *testnode.Node, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, SnapshotGroup+"_*.yaml"))
	if err != nil {
		return err
	}
	if len(files) != 3 {
		return fmt.Errorf("%s has %d CRDs of %s, want 3: %v", dir, len(files), SnapshotGroup, files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		if err := n.InstallCRD(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// createDriverObject makes the CSIDriver, before the kubelet registers the
// driver: without it the kubelet waits for an attachment that no
// external-attacher would make.
func createDriverObject(ctx context.Context, n *testnode.Node) error {
	obj := &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: DriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(false),
			PodInfoOnMount:       ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
			// A directory volume takes the pod's fsGroup, as a local
			// volume's does.
			FSGroupPolicy: ptr.To(storagev1.FileFSGroupPolicy),
		},
	}
	_, err := n.Client.StorageV1().CSIDrivers().Create(ctx, obj, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CSIDriver %s: %w", DriverName, err)
	}
	return nil
}

// createClasses makes the StorageClass and the VolumeSnapshotClass.
func createClasses(ctx context.Context, n *testnode.Node) error {
	sc := &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: StorageClass},
		Provisioner:          DriverName,
		ReclaimPolicy:        ptr.To(corev1.PersistentVolumeReclaimDelete),
		VolumeBindingMode:    ptr.To(storagev1.VolumeBindingImmediate),
		AllowVolumeExpansion: ptr.To(false),
	}
	if _, err := n.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass %s: %w", StorageClass, err)
	}
	dc, err := dynamic.NewForConfig(n.Config)
	if err != nil {
		return err
	}
	vsc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": SnapshotGroup + "/v1",
		"kind":       "VolumeSnapshotClass",
		"metadata": map[string]any{
			"name":        SnapshotClass,
			"annotations": map[string]any{"snapshot.storage.kubernetes.io/is-default-class": "true"},
		},
		"driver":         DriverName,
		"deletionPolicy": "Delete",
	}}
	if _, err := dc.Resource(VolumeSnapshotClasses).Create(ctx, vsc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create VolumeSnapshotClass %s: %w", SnapshotClass, err)
	}
	return nil
}

// serve runs the CSI services on Endpoint, then the registration on its
// socket, which the kubelet's plugin watcher finds.
func (d *Driver) serve() error {
	var err error
	if d.store, err = newStore(d.Dir); err != nil {
		return err
	}
	if d.logFile, err = os.Create(d.Log); err != nil {
		return err
	}
	logger := log.New(d.logFile, "", log.LstdFlags|log.Lmicroseconds)
	logCalls := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		begin := time.Now()
		resp, err := handler(ctx, req)
		if err != nil {
			logger.Printf("%s {%v}: %v (%v)", info.FullMethod, req, err, time.Since(begin).Round(time.Millisecond))
		} else {
			logger.Printf("%s {%v}: {%v} (%v)", info.FullMethod, req, resp, time.Since(begin).Round(time.Millisecond))
		}
		return resp, err
	}
	d.nodeService = &node{store: d.store, nodeID: testnode.Name, published: map[string]bool{}}
	d.csiServer = grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	csi.RegisterIdentityServer(d.csiServer, identity{})
	csi.RegisterControllerServer(d.csiServer, &controller{store: d.store})
	csi.RegisterNodeServer(d.csiServer, d.nodeService)
	if err := d.listen(d.csiServer, d.Endpoint); err != nil {
		return err
	}
	d.reg = &registration{endpoint: d.Endpoint}
	d.regServer = grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	registerapi.RegisterRegistrationServer(d.regServer, d.reg)
	return d.listen(d.regServer, d.registry)
}

// listen serves s on a unix socket at path, made anew.
func (d *Driver) listen(s *grpc.Server, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	d.serveStopped.Go(func() { _ = s.Serve(l) })
	return nil
}

// retryMax caps the sidecars' back-off (5 minutes by default): a claim
// from a snapshot not ready yet, or a snapshot of a claim not bound yet,
// is retried within seconds.
const retryMax = "--retry-interval-max=5s"

// csiTimeout bounds a sidecar's CSI call: a copy of a large volume takes
// its time.
const csiTimeout = "--timeout=5m"

// startSidecars runs upstream's snapshot controller and the two
// sidecars, with the node's admin credentials.
func (d *Driver) startSidecars(bins string) error {
	kubeconfig := "--kubeconfig=" + d.node.Kubeconfig
	csiAddress := "--csi-address=" + d.Endpoint
	var err error
	if d.SnapshotController, err = d.node.StartProcess("snapshot-controller", filepath.Join(bins, "snapshot-controller"),
		kubeconfig, "--leader-election=false", retryMax, "--v=4"); err != nil {
		return err
	}
	if d.Snapshotter, err = d.node.StartProcess("csi-snapshotter", filepath.Join(bins, "csi-snapshotter"),
		kubeconfig, csiAddress, "--leader-election=false", retryMax, csiTimeout, "--v=4"); err != nil {
		return err
	}
	d.Provisioner, err = d.node.StartProcess("csi-provisioner", filepath.Join(bins, "csi-provisioner"),
		kubeconfig, csiAddress, "--leader-election=false", retryMax, csiTimeout, "--v=4")
	return err
}

// waitRegistered waits until the node's CSINode lists the driver with the
// node's ID, while the sidecars run.
func (d *Driver) waitRegistered(ctx context.Context) error {
	sidecars := d.sidecars()
	err := eventually.Until(ctx, startTimeout, func(ctx context.Context) error {
		for _, p := range sidecars {
			select {
			case <-p.Done():
				return fmt.Errorf("%s exited (%v); log %s:\n%s", p.Name, p.Err(), p.Log, p.LogTail(30))
			default:
			}
		}
		if err := d.reg.failed(); err != nil {
			return err
		}
		cn, err := d.node.Client.StorageV1().CSINodes().Get(ctx, testnode.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("CSINode %s: %w", testnode.Name, err)
		}
		for _, dr := range cn.Spec.Drivers {
			if dr.Name == DriverName {
				if dr.NodeID != testnode.Name {
					return fmt.Errorf("CSINode %s lists %s with node ID %q", testnode.Name, DriverName, dr.NodeID)
				}
				return nil
			}
		}
		return fmt.Errorf("CSINode %s does not list %s", testnode.Name, DriverName)
	})
	if err != nil {
		return fmt.Errorf("the kubelet did not register %s within %v: %w", DriverName, startTimeout, err)
	}
	return nil
}

func (d *Driver) sidecars() []*testcluster.Process {
	var ps []*testcluster.Process
	for _, p := range []*testcluster.Process{d.SnapshotController, d.Snapshotter, d.Provisioner} {
		if p != nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// VolumePath is the data of the volume whose ID (its PersistentVolume's
// spec.csi.volumeHandle) is id: a Block volume's file, a Filesystem
// volume's directory.
func (d *Driver) VolumePath(id string) (string, error) {
	r, err := d.store.get(volumes, id)
	if err != nil {
		return "", fmt.Errorf("volume %s: %w", id, err)
	}
	return d.store.dataPath(volumes, id, r.Block), nil
}

// SnapshotPath is the data of the snapshot whose ID (its
// VolumeSnapshotContent's status.snapshotHandle) is id.
func (d *Driver) SnapshotPath(id string) (string, error) {
	r, err := d.store.get(snapshots, id)
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", id, err)
	}
	return d.store.dataPath(snapshots, id, r.Block), nil
}

// Volumes lists the IDs of the driver's volumes.
func (d *Driver) Volumes() ([]string, error) { return d.ids(volumes) }

// Snapshots lists the IDs of the driver's snapshots.
func (d *Driver) Snapshots() ([]string, error) { return d.ids(snapshots) }

func (d *Driver) ids(k kind) ([]string, error) {
	rs, err := d.store.list(k)
	if err != nil {
		return nil, err
	}
	ids := []string{}
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	return ids, nil
}

// podsGone bounds Stop's wait for the pods that use the driver's volumes.
const podsGone = time.Minute

// Stop deletes the pods that use the driver's volumes (the kubelet can
// unpublish them only while the driver runs), stops the sidecars and the
// driver (the kubelet then drops it from the CSINode), unmounts what it
// published still, detaches its loop devices and removes its volumes and
// snapshots. The classes, CRDs and CSIDriver stay for a later Start, and
// claims and snapshots in the cluster are left, their volumes gone. It
// returns what could not be undone; calling it again returns the same.
func (d *Driver) Stop() error {
	d.stopOnce.Do(func() { d.stopErr = d.stop() })
	return d.stopErr
}

func (d *Driver) stop() error {
	var errs []error
	if d.nodeService != nil {
		errs = append(errs, d.deletePods())
	}
	for _, p := range d.sidecars() {
		p.Stop()
	}
	if d.regServer != nil {
		d.regServer.Stop()
	}
	if d.nodeService != nil {
		errs = append(errs, d.nodeService.unmountAll())
	}
	if d.csiServer != nil {
		d.csiServer.Stop()
	}
	d.serveStopped.Wait()
	for _, s := range []string{d.registry, d.Endpoint} {
		if err := os.Remove(s); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d.store != nil {
		errs = append(errs, detachLoopsBelow(d.Dir), os.RemoveAll(d.Dir))
	}
	if d.logFile != nil {
		errs = append(errs, d.logFile.Close())
	}
	return errors.Join(errs...)
}

// deletePods deletes the pods that use a claim bound to one of the
// driver's volumes and waits until they are gone.
func (d *Driver) deletePods() error {
	ctx, cancel := context.WithTimeout(context.Background(), podsGone)
	defer cancel()
	client := d.node.Client
	pvs, err := client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	claims := map[string]bool{}
	for _, pv := range pvs.Items {
		if pv.Spec.CSI != nil && pv.Spec.CSI.Driver == DriverName && pv.Spec.ClaimRef != nil {
			claims[pv.Spec.ClaimRef.Namespace+"/"+pv.Spec.ClaimRef.Name] = true
		}
	}
	if len(claims) == 0 {
		return nil
	}
	users := func(ctx context.Context) ([]corev1.Pod, error) {
		pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var using []corev1.Pod
		for _, p := range pods.Items {
			for _, v := range p.Spec.Volumes {
				if v.PersistentVolumeClaim != nil && claims[p.Namespace+"/"+v.PersistentVolumeClaim.ClaimName] {
					using = append(using, p)
					break
				}
			}
		}
		return using, nil
	}
	pods, err := users(ctx)
	if err != nil {
		return err
	}
	for _, p := range pods {
		err := client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return eventually.Until(ctx, podsGone, func(ctx context.Context) error {
		left, err := users(ctx)
		if err == nil && len(left) > 0 {
			err = fmt.Errorf("%d pods that use the volumes of %s left, %s/%s among them", len(left), DriverName, left[0].Namespace, left[0].Name)
		}
		return err
	})
}
