package disk

import (
	"fmt"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// Paths and names in the uploader pod.
const (
	// ComponentDiskUpload marks the uploader pod among the VM's objects.
	ComponentDiskUpload = "disk-upload"
	// DevicePath is where the uploader pod has a disk on a Block claim,
	// whichever it is.
	DevicePath    = "/dev/vm-disk"
	volumeDisk    = "disk"
	volumeScratch = "scratch"
)

// PodName is the name of the VM's uploader pod: one upload per VM at a
// time.
func PodName(vm string) string { return vm + "-" + ComponentDiskUpload }

// FilePath is where the uploader pod has a disk on a Filesystem claim:
// the claim's image file.
var FilePath = runnerconfig.DiskFile("vm-disk")

// diskPath is where the uploader pod has the target's disk.
func (t *target) diskPath() string {
	if t.claimSize > 0 {
		return FilePath
	}
	return DevicePath
}

// RecordDir is where the receiver keeps its records: the import records
// of the VM's runner data, which the VM's own import (vm-runner import)
// reads too.
var RecordDir = runnerconfig.ImportRecords(runnerconfig.DataDir)

// uploaderPod is the pod that holds the disk's claim for the upload: the
// VM's runner image, placed as the VM's pod is (its volumes may be local
// to a node), with the disk (a block device, or a Filesystem claim
// mounted), the VM's runner data for the records and scratch space for
// the staged image. It runs "vm-runner disk wait" until it is deleted;
// the receiver runs in it through pods/exec. It passes Pod Security
// restricted, as the runner's user, as a VM's pod does: disk wait asks
// the node agent to give that user the block device. It needs none of
// the agent's devices, so it asks for no resource, and it does not talk
// to the API server.
func uploaderPod(t *target) (*corev1.Pod, error) {
	tmpl := &t.sts.Spec.Template.Spec
	var runner *corev1.Container
	for i := range tmpl.Containers {
		if tmpl.Containers[i].Name == render.ContainerRunner {
			runner = &tmpl.Containers[i]
		}
	}
	if runner == nil {
		return nil, fmt.Errorf("statefulset %s/%s has no container %q: cannot tell the VM's runner image", t.sts.Namespace, t.sts.Name, render.ContainerRunner)
	}
	// Not the VM's selector labels: neither its StatefulSet (which would
	// adopt the pod) nor its Services take the uploader for the VM's pod.
	labels := render.Labels(t.sts.Name)
	delete(labels, render.LabelName)
	labels[render.LabelComponent] = ComponentDiskUpload
	c := corev1.Container{
		// The runner's name: runnerexec execs into that container.
		Name:            render.ContainerRunner,
		Image:           runner.Image,
		ImagePullPolicy: runner.ImagePullPolicy,
		// Not the image's entrypoint: a VM's own runner image may have
		// another.
		Command: []string{"vm-runner", "disk", "wait"},
		VolumeMounts: []corev1.VolumeMount{
			{Name: render.VolumeRunnerData, MountPath: runnerconfig.DataDir},
			{Name: volumeScratch, MountPath: runnerconfig.ImportScratchDir},
		},
		SecurityContext: render.RestrictedContainer(),
	}
	render.AskNodeAgent(&c)
	if t.claimSize > 0 {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: volumeDisk, MountPath: path.Dir(FilePath)})
	} else {
		c.VolumeDevices = []corev1.VolumeDevice{{Name: volumeDisk, DevicePath: DevicePath}}
	}
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: PodName(t.sts.Name), Namespace: t.sts.Namespace, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			NodeName:                     tmpl.NodeName,
			NodeSelector:                 tmpl.NodeSelector,
			Affinity:                     tmpl.Affinity,
			Tolerations:                  tmpl.Tolerations,
			SecurityContext:              render.RestrictedPod(),
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			// disk wait ends at once on SIGTERM.
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers:                    []corev1.Container{c},
			Volumes: []corev1.Volume{
				{Name: volumeDisk, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: t.claim},
				}},
				{Name: render.VolumeRunnerData, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claimName(t.sts, render.VolumeRunnerData)},
				}},
				// Staging on the node's disk: neither memory nor the
				// container's root file system holds an image.
				{Name: volumeScratch, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				render.NodeAgentVolume(),
			},
		},
	}, nil
}

// receiveCommand is what runs in the uploader pod: vm-runner disk
// receive for size bytes of the file called name.
func receiveCommand(t *target, name string, size int64, force bool) []string {
	cmd := []string{"vm-runner", "disk", "receive",
		"--disk", t.disk,
		"--device", t.diskPath(),
		"--records", RecordDir,
		"--scratch", runnerconfig.ImportScratchDir,
		"--size", strconv.FormatInt(size, 10),
		"--name", name,
	}
	if t.claimSize > 0 {
		cmd = append(cmd, "--claim-size", strconv.FormatInt(t.claimSize, 10))
	}
	if force {
		cmd = append(cmd, "--force")
	}
	return cmd
}
