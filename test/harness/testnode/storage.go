package testnode

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// createStorageClasses makes the node's two classes, as a user of a small
// cluster with local disks would (examples/single-node).
func (n *Node) createStorageClasses(ctx context.Context) error {
	for _, sc := range []struct {
		name string
		dflt bool
	}{{StorageClassBlock, false}, {StorageClassFilesystem, true}} {
		obj := &storagev1.StorageClass{
			ObjectMeta:        metav1.ObjectMeta{Name: sc.name},
			Provisioner:       "kubernetes.io/no-provisioner",
			VolumeBindingMode: ptr.To(storagev1.VolumeBindingWaitForFirstConsumer),
			ReclaimPolicy:     ptr.To(corev1.PersistentVolumeReclaimRetain),
		}
		if sc.dflt {
			obj.Annotations = map[string]string{"storageclass.kubernetes.io/is-default-class": "true"}
		}
		if _, err := n.Client.StorageV1().StorageClasses().Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create storage class %s: %w", sc.name, err)
		}
	}
	return nil
}

// Volume is a PersistentVolume to add to the node.
type Volume struct {
	Name string
	Size resource.Quantity
	// Labels let a claim select the volume, as VM-Operator's examples do.
	Labels map[string]string
	// Content, for a Block volume, is a file whose bytes the volume starts
	// with (a bootable disk image); the rest reads as zeros.
	Content string
	// Space is the room the volume's data has, so that a test can fill
	// it: a tmpfs of that size, SpaceDir, that holds a Filesystem
	// volume's directory or a Block volume's sparse file (a thin volume),
	// and the files that fill it. Zero: the node's disk.
	Space resource.Quantity
}

// AddBlockVolume adds a local Block PersistentVolume of class
// StorageClassBlock on LoopDevice(v).
func (n *Node) AddBlockVolume(ctx context.Context, v Volume) error {
	dev, err := n.LoopDevice(v)
	if err != nil {
		return err
	}
	return n.createPV(ctx, v, StorageClassBlock, corev1.PersistentVolumeBlock, dev)
}

// LoopDevice makes a sparse file of v's size and content, DiskFile(v.Name),
// on a loop device of the node (detached by Stop), and returns the
// device's path: a disk of the node's, for a PersistentVolume.
func (n *Node) LoopDevice(v Volume) (string, error) {
	file := n.DiskFile(v.Name)
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", err
	}
	if !v.Space.IsZero() {
		var err error
		if file, err = n.onSpace(v, file, thinPrefix+v.Name+".img"); err != nil {
			return "", err
		}
	}
	if err := writeSparse(file, v.Content, v.Size.Value()); err != nil {
		return "", err
	}
	out, err := exec.Command("losetup", "--find", "--show", file).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup %s: %w: %s", file, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// AddFilesystemVolume adds a local PersistentVolume of class
// StorageClassFilesystem: a directory of the node's.
func (n *Node) AddFilesystemVolume(ctx context.Context, v Volume) error {
	dir := n.VolumePath(v.Name)
	if v.Space.IsZero() {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return err
		}
	} else {
		// Beside what fills its tmpfs, as local-path's directories share
		// the node's disk.
		var err error
		if dir, err = n.onSpace(v, dir, "volume"); err != nil {
			return err
		}
		// Open to the pod's users, as the tmpfs's root is.
		if err := os.Mkdir(dir, 0o777); err != nil {
			return err
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			return err
		}
	}
	return n.createPV(ctx, v, StorageClassFilesystem, corev1.PersistentVolumeFilesystem, dir)
}

// onSpace mounts v's tmpfs of v.Space at SpaceDir(v.Name) and returns
// the path of name on it, to which link (a path the tests know) points.
func (n *Node) onSpace(v Volume, link, name string) (string, error) {
	space := n.SpaceDir(v.Name)
	if err := mountTmpfs(space, v.Space); err != nil {
		return "", fmt.Errorf("volume %s: %w", v.Name, err)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(space, name)
	return path, os.Symlink(path, link)
}

// mountTmpfs mounts a tmpfs of size at dir, made first; Stop unmounts it
// with the rest below the node's directory.
func mountTmpfs(dir string, size resource.Quantity) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0777", size.Value()), "tmpfs", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("mount a tmpfs: %w: %s", err, out)
	}
	return nil
}

// thinPrefix starts the name of a thin volume's file. Once Stop has
// unmounted (lazily) the tmpfs that holds it, its loop device names it as
// if at the root: /thinPrefix..., which isThin tells.
const thinPrefix = "vmop-thin-"

func isThin(back string) bool { return strings.HasPrefix(back, "/"+thinPrefix) }

// SpaceDir is the file system of a volume made with Space, which holds
// its directory or sparse file: a test fills it to fill the volume.
func (n *Node) SpaceDir(name string) string { return filepath.Join(n.dir, "space", name) }

// VolumePath is where a Filesystem volume's files are on the node.
func (n *Node) VolumePath(name string) string { return filepath.Join(n.dir, "volumes", name) }

// DiskFile is the file behind a Block volume, to read what a guest wrote.
func (n *Node) DiskFile(name string) string { return filepath.Join(n.dir, "disks", name+".img") }

// StorageDir is a directory of the node's for the files of a storage
// driver (test/harness/csidriver's): Stop, and a later Start after a
// killed run, unmount what is mounted below the node's directory and
// detach the loop devices of its files, as they do for the node's own
// volumes.
func (n *Node) StorageDir(driver string) string { return filepath.Join(n.dir, "storage", driver) }

func (n *Node) createPV(ctx context.Context, v Volume, class string, mode corev1.PersistentVolumeMode, path string) error {
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: v.Name, Labels: v.Labels},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: v.Size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              class,
			VolumeMode:                    &mode,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{Local: &corev1.LocalVolumeSource{Path: path}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{Name},
				}}}},
			}},
		},
	}
	if _, err := n.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create persistent volume %s: %w", v.Name, err)
	}
	return nil
}

// writeSparse makes file size bytes long, starting with content's bytes.
// Blocks of zeros stay holes, so that a disk image of gigabytes (the
// Debian guest's) costs the node what it holds.
func writeSparse(file, content string, size int64) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	if content != "" {
		src, err := os.Open(content)
		if err != nil {
			return err
		}
		defer src.Close()
		buf := make([]byte, 1<<20)
		for off := int64(0); ; {
			n, err := io.ReadFull(src, buf)
			if n > 0 && !zeros(buf[:n]) {
				if _, err := f.WriteAt(buf[:n], off); err != nil {
					return err
				}
			}
			off += int64(n)
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err != nil {
				return err
			}
		}
	}
	if err := f.Truncate(size); err != nil {
		return err
	}
	return f.Close()
}

func zeros(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// detachLoops detaches the node's loop devices and those the kubelet made
// for its block volumes (backed by files under the node's directory).
func (n *Node) detachLoops() []error {
	if n.dir == "" {
		return nil
	}
	return detachLoopsOf(func(back string) bool { return strings.HasPrefix(back, n.dir+"/") || isThin(back) })
}

// detachLoopsOf detaches the loop devices whose backing file matches, and
// first those stacked on them: the kubelet maps a Block volume through a
// loop device of its own on the volume's device node, whose backing file
// shows as "/" once the kubelet's bind mount is gone, but whose backing
// inode is still that node's (or, where losetup tells it so, whose
// backing device number is the volume's).
func detachLoopsOf(match func(back string) bool) []error {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--raw", "--output", "NAME,MAJ:MIN,BACK-MAJ:MIN,BACK-INO,BACK-FILE").Output()
	if err != nil {
		return []error{fmt.Errorf("losetup --list: %w", err)}
	}
	type loop struct{ name, dev, backNode, back string }
	var all []loop
	for _, line := range strings.Split(string(out), "\n") {
		// The backing file comes last and may hold spaces; --raw writes
		// the columns' padding and the file's spaces as \x20.
		f := strings.SplitN(line, " ", 5)
		if len(f) == 5 {
			num := func(s string) string { return strings.ReplaceAll(s, `\x20`, "") }
			all = append(all, loop{f[0], num(f[1]), num(f[2]) + " " + num(f[3]), strings.ReplaceAll(f[4], `\x20`, " ")})
		}
	}
	// ours holds our loops by device number, and by their device
	// node's file (its file system's MAJ:MIN and inode).
	ours := map[string]bool{}
	var first, then []string
	for _, l := range all {
		if match(l.back) {
			ours[l.dev] = true
			var st unix.Stat_t
			if unix.Stat(l.name, &st) == nil {
				ours[fmt.Sprintf("%d:%d %d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)] = true
			}
			then = append(then, l.name)
		}
	}
	for _, l := range all {
		backDev, _, _ := strings.Cut(l.backNode, " ")
		if (ours[backDev] || ours[l.backNode]) && !ours[l.dev] {
			first = append(first, l.name)
		}
	}
	var errs []error
	for _, dev := range append(first, then...) {
		if err := run("losetup", "--detach", dev); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}
