// Package vmsnapshot is a VM's snapshots as the cluster holds them, in
// either mode: a Secret per snapshot (what it is, the VM's manifest as it
// was, the archive of its runner data: firmware variables, TPM state,
// machine uuid) that owns, per disk, a CSI VolumeSnapshot where the
// disk's storage class has a VolumeSnapshotClass, else a claim holding
// the disk's copy. Deleting the Secret deletes them (the garbage
// collector); a VM's deletion deletes neither. kubectl vm snapshot, restore and clone share
// it.
package vmsnapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/vmpod"
)

const (
	// Component labels a snapshot's Secret, claims and pod.
	Component = "snapshot"
	// LabelSnapshot names the snapshot on its Secret and claims.
	LabelSnapshot = v1.Group + "/snapshot"
	// AnnotationInfo on the Secret holds Info as JSON, readable with
	// kubectl get -o yaml.
	AnnotationInfo = v1.Group + "/snapshot"
	// SecretType is the Secrets' type.
	SecretType corev1.SecretType = v1.Group + "/snapshot"
	// KeyManifest holds the VM's manifest as it was (the VirtualMachine,
	// or in GitOps mode the StatefulSet), KeyStatefulSet its StatefulSet
	// (the runner image and placement of a clone of a deleted VM),
	// KeyRunnerData the runner data's archive.
	KeyManifest    = "vm.yaml"
	KeyStatefulSet = "statefulset.yaml"
	KeyRunnerData  = "runner-data.tar.gz"
)

// Phases of a snapshot.
const (
	PhaseInProgress = "InProgress"
	PhaseReady      = "Ready"
)

// Consistency of a snapshot's disks.
const (
	// Consistent: the guest's file systems were frozen while the copy
	// began.
	Consistent = "consistent"
	// CrashConsistent: as after a power cut (no agent, or it failed).
	CrashConsistent = "crash-consistent"
	// Stopped: taken while the VM was stopped.
	Stopped = "stopped"
)

// KindCopy is a snapshot whose disks vmop copied into claims of the
// disks' storage classes; any storage can hold it.
const KindCopy = "copy"

// Info is what a snapshot is.
type Info struct {
	VM          string `json:"vm"`
	Name        string `json:"name"`
	Kind        string `json:"kind"`
	Phase       string `json:"phase"`
	Consistency string `json:"consistency,omitempty"`
	// Why the snapshot is only crash-consistent.
	Why           string  `json:"why,omitempty"`
	FrozenSeconds float64 `json:"frozenSeconds,omitempty"`
	// Seconds the copy took; Bytes it copied.
	Seconds float64 `json:"seconds,omitempty"`
	Bytes   int64   `json:"bytes,omitempty"`
	Disks   []Disk  `json:"disks"`
}

// Disk is one disk of a snapshot.
type Disk struct {
	// Name is the disk's volume name in the VM (root-disk).
	Name string `json:"name"`
	// Claim holds the copy (KindCopy), VolumeSnapshot the CSI snapshot
	// (KindCSI); Size is the disk's size in bytes.
	Claim          string `json:"claim,omitempty"`
	VolumeSnapshot string `json:"volumeSnapshot,omitempty"`
	Size           int64  `json:"size"`
	// Block: the claim is a Block volume, else a Filesystem one holding
	// the image file.
	Block bool `json:"block"`
	// StorageClass and AccessModes are the disk's claim's (KindCSI): what
	// a claim made from the VolumeSnapshot asks for.
	StorageClass string                              `json:"storageClass,omitempty"`
	AccessModes  []corev1.PersistentVolumeAccessMode `json:"accessModes,omitempty"`
}

// Snapshot is a snapshot's Secret and what it says.
type Snapshot struct {
	Secret *corev1.Secret
	Info   Info
}

// nameRe is what a snapshot's name may be: a DNS label, short enough
// for the names made of it.
var nameRe = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`)

// ValidName checks a snapshot's name.
func ValidName(name string) error {
	if !nameRe.MatchString(name) {
		return fmt.Errorf("snapshot name %q: must be 1 to 40 lower-case letters, digits and '-', starting and ending with a letter or digit", name)
	}
	return nil
}

// NewName names a snapshot by when it is taken.
func NewName(now time.Time) string { return now.UTC().Format("20060102-150405") }

// SecretName is the Secret of snapshot snap of VM vm.
func SecretName(vm, snap string) string { return vm + "-snapshot-" + snap }

// ClaimName is the claim that holds disk's copy in the snapshot.
func ClaimName(vm, snap, disk string) string { return SecretName(vm, snap) + "-" + disk }

// PodName is the pod that takes and restores the VM's snapshots, one
// at a time.
func PodName(vm string) string { return vm + "-snapshot" }

// Labels are a snapshot's Secret's and claims' labels. Not the VM's
// selector labels: nothing of the VM selects them.
func Labels(vm, snap string) map[string]string {
	l := render.Labels(vm)
	delete(l, vmpod.LabelName)
	l[vmpod.LabelComponent] = Component
	l[LabelSnapshot] = snap
	return l
}

// NewSecret is the Secret of a snapshot being taken.
func NewSecret(ns string, info Info, manifest []byte) (*corev1.Secret, error) {
	s := &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(info.VM, info.Name), Namespace: ns, Labels: Labels(info.VM, info.Name)},
		Type:       SecretType,
		Data:       map[string][]byte{KeyManifest: manifest},
	}
	return s, SetInfo(s, info)
}

// SetInfo writes info into the Secret's annotation.
func SetInfo(s *corev1.Secret, info Info) error {
	b, err := json.Marshal(info)
	if err != nil {
		return err
	}
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[AnnotationInfo] = string(b)
	return nil
}

// OwnedBy makes the snapshot's Secret own obj (a claim), so that deleting
// the snapshot deletes it.
func OwnedBy(s *corev1.Secret) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "v1", Kind: "Secret", Name: s.Name, UID: s.UID, BlockOwnerDeletion: ptr.To(true)}}
}

// decode reads a Secret's Info.
func decode(s *corev1.Secret) (Snapshot, error) {
	var info Info
	if err := json.Unmarshal([]byte(s.Annotations[AnnotationInfo]), &info); err != nil {
		return Snapshot{}, fmt.Errorf("secret %s/%s: annotation %s: %w", s.Namespace, s.Name, AnnotationInfo, err)
	}
	return Snapshot{Secret: s, Info: info}, nil
}

// List returns the snapshots of VM vm in namespace ns, or of every VM
// when vm is empty, oldest first.
func List(ctx context.Context, c *vmclient.Client, ns, vm string) ([]Snapshot, error) {
	sel := labels.Set{vmpod.LabelComponent: Component}
	if vm != "" {
		sel[vmpod.LabelInstance] = vm
	}
	list, err := c.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, c.Explain(err)
	}
	var snaps []Snapshot
	for i := range list.Items {
		s := &list.Items[i]
		if s.Type != SecretType {
			continue
		}
		snap, err := decode(s)
		if err != nil {
			return nil, err
		}
		snaps = append(snaps, snap)
	}
	sort.SliceStable(snaps, func(i, j int) bool {
		a, b := snaps[i].Secret, snaps[j].Secret
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return snaps, nil
}

// Get finds snapshot snap of VM vm in namespace ns.
func Get(ctx context.Context, c *vmclient.Client, ns, vm, snap string) (*Snapshot, error) {
	s, err := c.Kube.CoreV1().Secrets(ns).Get(ctx, SecretName(vm, snap), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, fmt.Errorf("vm %s/%s has no snapshot %q (kubectl vm snapshot list %s)", ns, vm, snap, vm)
	case err != nil:
		return nil, c.Explain(err)
	case s.Type != SecretType:
		return nil, fmt.Errorf("secret %s/%s is no snapshot (its type is %q)", ns, s.Name, s.Type)
	}
	got, err := decode(s)
	return &got, err
}

// Delete deletes a snapshot: its Secret, and through it its claims.
func Delete(ctx context.Context, c *vmclient.Client, s *corev1.Secret) error {
	err := c.Kube.CoreV1().Secrets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: ptr.To(s.UID)},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return c.Explain(err)
}
