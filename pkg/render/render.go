// Package render turns a VirtualMachine into the Kubernetes objects that run
// it. It is pure: no client, no clock, no randomness, so the same input
// always gives byte-identical output. The plugin (kubectl vm render, the KRM
// function) and the operator both call it; nothing else builds these objects.
package render

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/cloudinit"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/version"
	"github.com/vmop/vmop/pkg/vmpod"
)

// Annotations on what is rendered.
const (
	// AnnotationHash carries a hash of what an object is rendered from, so
	// that a caller can skip a write when the object in the cluster has the
	// same. Each object has its own: a live change (currentCpus, currentRam,
	// a CD, the reset counter) changes the ConfigMap's hash only.
	AnnotationHash = v1.Group + "/render-hash"
	// AnnotationRestartHash, on the pod template and so on the pod, is a
	// hash of what applies only when the VM starts. A pod whose value
	// differs from its StatefulSet's template runs an outdated VM.
	AnnotationRestartHash = v1.Group + "/restart-hash"
)

// Version names the rendering rules. It is part of every hash, so it must
// change whenever the output for the same input changes; the golden tests
// fail until it does.
const Version = "18"

// Names of containers, volumes and ports in the pod.
const (
	ContainerRunner = "runner"
	ContainerImport = "import"
	// ContainerImportBin copies vm-runner for the ContainerFetch ones.
	ContainerImportBin = "import-bin"
	// ContainerFetch and the disk's index name the init container that
	// copies a containerDisk out of its image.
	ContainerFetch        = "fetch-"
	VolumeConfig          = "config"
	VolumeImportScratch   = "import-scratch"
	VolumeImportBin       = "import-bin"
	VolumeRunnerData      = vmpod.DataVolume
	VolumeImageRepository = "image-repository"
	PortSpice             = "spice"
	// ImageRepositoryClaim is the shared PVC with CD images, as in VM-Operator.
	ImageRepositoryClaim = "vmop-image-repository"
)

// Pod sizing, as VM-Operator does: a VM rarely uses all its CPUs and RAM.
const (
	cpuOvercommit = 2
	ramOvercommit = 1.25
	// graceMargin is added to powerdownTimeout so that the runner can stop
	// qemu hard after the timeout before the kubelet kills the pod.
	graceMargin = 10
)

// Options is what the caller knows beyond the VirtualMachine itself.
type Options struct {
	// DisplaySecret names the VM's display Secret. Empty means the
	// conventional "<vm>-display-secret", mounted as optional.
	DisplaySecret string
	// ServiceAccount is the runner pod's service account. Empty leaves the
	// namespace's default, which suits GitOps mode: the account must exist
	// before the StatefulSet can create its pod.
	ServiceAccount string
	// ImageRegistry is where a VM without spec.image finds vmop's runner
	// image (a mirror, for air-gapped clusters); empty means
	// version.Registry. The tag is always this build's version.
	ImageRegistry string
	// ConfigAccess, for GitOps mode, lets the runner get and watch its own
	// ConfigMap and nothing else: a Role and RoleBinding RunnerAccount(vm)
	// for the pod's account, which is a ServiceAccount of that name when
	// ServiceAccount names none. Live changes then reach the runner in a
	// second, not at the kubelet's refresh of the config volume (about a
	// minute). The operator leaves it off: it has the kubelet refresh the
	// volume at once. (omitempty: off, the hashes stay as they were.)
	ConfigAccess bool `json:",omitempty"`
}

// Objects are the objects one VM renders to. Secret, Service and
// DisruptionBudget are nil when the VM has no cloud-init data, no load
// balancer or no drain: wait annotation.
type Objects struct {
	StatefulSet      *appsv1.StatefulSet
	ConfigMap        *corev1.ConfigMap
	Secret           *corev1.Secret
	Service          *corev1.Service
	DisruptionBudget *policyv1.PodDisruptionBudget
	// ServiceAccount, Role and RoleBinding give the runner read access to
	// its ConfigMap (Options.ConfigAccess); nil without it, and the
	// ServiceAccount also when Options.ServiceAccount names one.
	ServiceAccount *corev1.ServiceAccount
	Role           *rbacv1.Role
	RoleBinding    *rbacv1.RoleBinding
	// Warnings tell what the VM asks for that it does not get as written
	// (ignored fields, RAM rounded up to a MiB).
	Warnings []string
}

// List returns the objects in a fixed order (the account, ConfigMap and
// Secret before the StatefulSet whose pod needs them).
func (o *Objects) List() []runtime.Object {
	var out []runtime.Object
	if o.ServiceAccount != nil {
		out = append(out, o.ServiceAccount)
	}
	if o.Role != nil {
		out = append(out, o.Role, o.RoleBinding)
	}
	out = append(out, o.ConfigMap)
	if o.Secret != nil {
		out = append(out, o.Secret)
	}
	out = append(out, o.StatefulSet)
	if o.Service != nil {
		out = append(out, o.Service)
	}
	if o.DisruptionBudget != nil {
		out = append(out, o.DisruptionBudget)
	}
	return out
}

// InvalidError is a VirtualMachine that failed validation, with all its
// problems.
type InvalidError struct {
	Name   string
	Errors field.ErrorList
}

func (e *InvalidError) Error() string {
	lines := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		lines[i] = e.Name + ": " + fe.Error()
	}
	return strings.Join(lines, "\n")
}

// Render defaults and validates vm (a copy; vm is not changed) and renders
// it. A VM that fails validation gives an *InvalidError.
func Render(vm *v1.VirtualMachine, opts Options) (*Objects, error) {
	return render(vm.DeepCopy(), opts)
}

// Validate returns the *InvalidError that Render would return for vm, or
// nil, without rendering: for callers that must not act for an invalid VM.
func Validate(vm *v1.VirtualMachine, opts Options) error {
	_, err := prepare(vm.DeepCopy(), opts)
	return err
}

// RunnerConfig is the runner's config in the ConfigMap that Render writes
// for vm, as the runner reads it (defaulted and validated), without
// rendering the rest: kubectl vm list shows it for thousands of VMs.
func RunnerConfig(vm *v1.VirtualMachine, opts Options) (*runnerconfig.Config, error) {
	r, err := newRenderer(vm.DeepCopy(), opts)
	if err != nil {
		return nil, err
	}
	c := &r.runnerConfig().Runner
	if err := c.Complete(); err != nil {
		return nil, fmt.Errorf("%s: runner config: %w", vm.Name, err)
	}
	return c, nil
}

// render defaults, validates and renders a VM that it may change.
func render(vm *v1.VirtualMachine, opts Options) (*Objects, error) {
	r, err := newRenderer(vm, opts)
	if err != nil {
		return nil, err
	}
	return r.render()
}

// newRenderer defaults and validates a VM that it may change.
func newRenderer(vm *v1.VirtualMachine, opts Options) (*renderer, error) {
	a, err := prepare(vm, opts)
	if err != nil {
		return nil, err
	}
	return &renderer{vm: vm, opts: opts, annotations: a}, nil
}

// annotations are what the VM says in its annotations rather than its
// spec: metadata, so no spec hash sees them, only the ConfigMap's.
type annotations struct {
	// resetCounter: the runner resets the guest live.
	resetCounter int64
	// displayWithoutPassword opts out of the locked display.
	displayWithoutPassword bool
	// drainWaits: a drain of the VM's node waits for a person.
	drainWaits bool
}

// prepare defaults and validates vm, which it may change, and returns what
// its annotations say.
func prepare(vm *v1.VirtualMachine, opts Options) (annotations, error) {
	if vm.Spec.Image == nil {
		// The runner image of this build's version (from ImageRegistry
		// when given): a renderer names the runner it was built with,
		// never "latest".
		vm.Spec.Image = &v1.Image{Source: version.Image(opts.ImageRegistry, version.RunnerImage)}
	}
	vm.Default()
	errs := vm.Validate()
	var a annotations
	var err *field.Error
	if a.resetCounter, err = vm.ResetCounter(); err != nil {
		errs = append(errs, err)
	}
	if a.displayWithoutPassword, err = vm.DisplayWithoutPassword(); err != nil {
		errs = append(errs, err)
	}
	if a.drainWaits, err = vm.DrainWaits(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return annotations{}, &InvalidError{Name: vm.Name, Errors: errs}
	}
	return a, nil
}

type renderer struct {
	vm          *v1.VirtualMachine
	opts        Options
	annotations annotations
}

func (r *renderer) render() (*Objects, error) {
	cm, err := r.configMap()
	if err != nil {
		return nil, err
	}
	secret, err := r.cloudInitSecret()
	if err != nil {
		return nil, err
	}
	restartHash, err := r.specHash(restartSpec)
	if err != nil {
		return nil, err
	}
	objs := &Objects{ConfigMap: cm, Secret: secret, StatefulSet: r.statefulSet(secret, restartHash), Service: r.service(),
		DisruptionBudget: r.disruptionBudget(), Warnings: r.warnings()}
	stsHash, err := r.specHash(templateSpec)
	if err != nil {
		return nil, err
	}
	setHash(objs.StatefulSet, stsHash)
	setHash(cm, hashOf([]byte(cm.Namespace), []byte(cm.Name), []byte(cm.Data[vmpod.ConfigFile])))
	if secret != nil {
		parts := [][]byte{[]byte(secret.Namespace), []byte(secret.Name)}
		for _, k := range cloudInitFiles {
			parts = append(parts, []byte(k), secret.Data[k])
		}
		setHash(secret, hashOf(parts...))
	}
	if objs.Service != nil {
		if err := r.hashItself(objs.Service); err != nil {
			return nil, err
		}
	}
	if objs.DisruptionBudget != nil {
		if err := r.hashItself(objs.DisruptionBudget); err != nil {
			return nil, err
		}
	}
	if r.configAccess() {
		objs.ServiceAccount, objs.Role, objs.RoleBinding = r.runnerAccess()
		access := []metav1.Object{objs.Role, objs.RoleBinding}
		if objs.ServiceAccount != nil {
			access = append(access, objs.ServiceAccount)
		}
		for _, o := range access {
			if err := r.hashItself(o); err != nil {
				return nil, err
			}
		}
	}
	return objs, nil
}

// hashItself sets the hash of an object that is rare and small: of the
// object itself.
func (r *renderer) hashItself(o metav1.Object) error {
	b, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("%s: %w", r.vm.Name, err)
	}
	setHash(o, hashOf(b))
	return nil
}

func setHash(o metav1.Object, hash string) {
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationHash] = hash
	o.SetAnnotations(a)
}

// Labels returns the labels that mark every object of the VM.
func Labels(vm string) map[string]string {
	return map[string]string{vmpod.LabelName: vmpod.NameRunner, vmpod.LabelInstance: vm, vmpod.LabelManagedBy: vmpod.ManagedBy}
}

// SelectorLabels select the VM's pod. They never change, since a
// StatefulSet's selector is immutable.
func SelectorLabels(vm string) map[string]string {
	return map[string]string{vmpod.LabelName: vmpod.NameRunner, vmpod.LabelInstance: vm}
}

// CloudInitSecretName is the name of the VM's cloud-init Secret.
func CloudInitSecretName(vm string) string { return vm + "-cloud-init" }

// DisplaySecretLabels mark the Secret with a VM's display password, which
// render never makes: the operator or the console command does.
func DisplaySecretLabels(vm string) map[string]string {
	l := Labels(vm)
	l[vmpod.LabelComponent] = vmpod.ComponentDisplaySecret
	return l
}

// DisplayWithoutPasswordWarning is what render and kubectl vm status say
// of a VM that opts out of the locked display.
const DisplayWithoutPasswordWarning = "metadata.annotations[" + v1.AnnotationDisplayWithoutPassword + "]: the SPICE display has no password: whoever reaches the pod's SPICE port gets the screen, keyboard and USB redirection; remove the annotation to lock it"

// DisplaySecretName is the conventional name of a VM's display Secret.
func DisplaySecretName(vm string) string { return vm + "-display-secret" }

// PodName is the name of the VM's pod: the one replica of its StatefulSet.
func PodName(vm string) string { return vm + "-0" }

func (r *renderer) meta(name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: r.vm.Namespace, Labels: Labels(r.vm.Name)}
}

func (r *renderer) configMap() (*corev1.ConfigMap, error) {
	data, err := manifest.Marshal(r.runnerConfig())
	if err != nil {
		return nil, fmt.Errorf("%s: runner config: %w", r.vm.Name, err)
	}
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: r.meta(r.vm.Name),
		Data:       map[string]string{vmpod.ConfigFile: string(data)},
	}, nil
}

func (r *renderer) runnerConfig() *runnerconfig.File {
	s, v := &r.vm.Spec, &r.vm.Spec.VM
	c := runnerconfig.Config{
		DataDir:            vmpod.DataDir,
		GuestShutdownStops: s.GuestShutdownStops,
		ResetCounter:       r.annotations.resetCounter,
		VM: runnerconfig.VM{
			Name:             r.vm.Name,
			UUID:             v.MachineUUID,
			UseTPM:           v.UseTPM,
			Firmware:         string(v.Firmware),
			BootMenu:         v.BootMenu,
			PowerdownTimeout: v.PowerdownTimeout,
			MaximumRAM:       runnerconfig.Size{Bytes: v.MaximumRAM.Bytes()},
			CurrentRAM:       runnerconfig.Size{Bytes: v.CurrentRAM.Bytes()},
			CPUModel:         v.CPUModel,
			MaximumCPUs:      *v.MaximumCPUs,
			CurrentCPUs:      *v.CurrentCPUs,
			RTCBase:          v.RTCBase,
			RTCClock:         v.RTCClock,
		},
	}
	if t := s.RunnerTemplate; t != nil {
		c.Template = t.Source
		c.UpdateTemplate = *t.Update
	}
	if t := v.CPUTopology; t != nil {
		c.VM.Sockets, c.VM.DiesPerSocket, c.VM.CoresPerDie, c.VM.ThreadsPerCore = t.Sockets, t.DiesPerSocket, t.CoresPerDie, t.ThreadsPerCore
	}
	for _, n := range v.Networks {
		switch {
		case n.Tap != nil:
			c.VM.Network = append(c.VM.Network, runnerconfig.Network{Type: runnerconfig.NetworkTap, Device: n.Tap.Device, Bridge: n.Tap.Bridge, MAC: n.Tap.MAC})
		case n.User != nil:
			c.VM.Network = append(c.VM.Network, runnerconfig.Network{Type: runnerconfig.NetworkUser, Device: n.User.Device, Net: n.User.Net, MAC: n.User.MAC})
		case n.Pod != nil:
			rn := runnerconfig.Network{Type: runnerconfig.NetworkPod, Device: n.Pod.Device, Net: n.Pod.Net, MAC: n.Pod.MAC}
			for _, p := range n.Pod.Ports {
				rn.Ports = append(rn.Ports, runnerconfig.Port{Port: int(p.Port), Protocol: string(p.Protocol)})
			}
			c.VM.Network = append(c.VM.Network, rn)
		}
	}
	for i, d := range v.Disks {
		switch {
		case d.VolumeClaimTemplate != nil:
			dr := runnerconfig.Drive{Type: runnerconfig.DriveRaw, Bootindex: d.Bootindex, Resource: "/dev/" + v.DiskName(i)}
			if size := FileDiskSize(d.VolumeClaimTemplate.Spec); size > 0 {
				dr.Resource, dr.ClaimSize = runnerconfig.DiskFile(v.DiskName(i)), size
			}
			if src := d.Source; src != nil {
				dr.Source = &runnerconfig.DriveSource{URL: src.URL, ContainerDisk: src.ContainerDisk, Checksum: src.Checksum}
				switch {
				case src.File != "":
					dr.Source.File = path.Join(vmpod.ImageRepositoryDir, src.File)
				case src.ContainerDisk != "":
					dr.Source.File = runnerconfig.ContainerDiskFile(v.DiskName(i))
				}
			}
			c.VM.Drives = append(c.VM.Drives, dr)
		case d.CDROM != nil:
			c.VM.Drives = append(c.VM.Drives, runnerconfig.Drive{Type: runnerconfig.DriveCDROM, Bootindex: d.Bootindex, File: CDROMFile(d.CDROM.Image)})
		}
	}
	if sc := v.SerialConsole; sc != nil && sc.PodLog {
		c.VM.SerialConsole = &runnerconfig.SerialConsole{PodLog: true}
	}
	if d := v.Display; d != nil {
		c.VM.Display = &runnerconfig.Display{Outputs: *d.Outputs, LoggedInUser: d.LoggedInUser}
		if sp := d.Spice; sp != nil {
			c.VM.Display.Spice = &runnerconfig.Spice{Port: *sp.Port, UsbRedirects: *sp.UsbRedirects, StreamingVideo: sp.StreamingVideo,
				WithoutPassword: r.annotations.displayWithoutPassword}
		}
	}
	return &runnerconfig.File{Runner: c}
}

// warnings are the VM's own and those about how the runner takes its
// values.
func (r *renderer) warnings() []string {
	w := r.vm.Warnings()
	v := &r.vm.Spec.VM
	if b := v.MaximumRAM.Bytes(); runnerconfig.RoundUpMiB(b) != b {
		got := v1.FormatBytes(runnerconfig.RoundUpMiB(b))
		w = append(w, fmt.Sprintf("spec.vm.maximumRam %s is not a whole number of MiB: the VM gets %s (qemu sizes RAM in MiB)", v.MaximumRAM, got))
	}
	if r.annotations.displayWithoutPassword && v.Display.Spice != nil {
		w = append(w, DisplayWithoutPasswordWarning)
	}
	return w
}

// CDROMFile is the runner's file for a CD image: empty and URLs stay as
// they are, a relative path is in the image repository volume.
func CDROMFile(image string) string {
	if image == "" || strings.Contains(image, "://") || path.IsAbs(image) {
		return image
	}
	return path.Join(vmpod.ImageRepositoryDir, image)
}

// cloudInitFiles are the NoCloud files, in the order they are projected.
var cloudInitFiles = []string{cloudinit.MetaDataFile, cloudinit.UserDataFile, cloudinit.NetworkConfigFile}

// cloudInitSecret holds the NoCloud files, defaulted as the runner would
// (local-hostname, and an instance-id that changes with the data), so
// that the guest runs cloud-init again exactly when the data changes.
func (r *renderer) cloudInitSecret() (*corev1.Secret, error) {
	ci := r.vm.Spec.CloudInit
	if ci == nil || (ci.MetaData.IsNull() && ci.UserData.IsNull() && ci.NetworkConfig.IsNull()) {
		return nil, nil
	}
	in := &runnerconfig.CloudInit{}
	in.MetaData, _ = ci.MetaData.Map()
	in.NetworkConfig, _ = ci.NetworkConfig.Map()
	if !ci.UserData.IsNull() {
		if err := ci.UserData.Decode(&in.UserData); err != nil {
			return nil, fmt.Errorf("%s: spec.cloudInit.userData: %w", r.vm.Name, err)
		}
	}
	d, err := cloudinit.FromConfig(in, r.vm.Name)
	if err != nil {
		return nil, err
	}
	data := map[string][]byte{}
	for k, v := range map[string][]byte{cloudinit.MetaDataFile: d.MetaData, cloudinit.UserDataFile: d.UserData, cloudinit.NetworkConfigFile: d.NetworkConfig} {
		if len(v) > 0 {
			data[k] = v
		}
	}
	return &corev1.Secret{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: r.meta(CloudInitSecretName(r.vm.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       data,
	}, nil
}

func (r *renderer) statefulSet(cloudInit *corev1.Secret, restartHash string) *appsv1.StatefulSet {
	vm, v := r.vm, &r.vm.Spec.VM
	replicas := int32(0)
	if v.State == v1.StateRunning {
		replicas = 1
	}
	podLabels := Labels(vm.Name)
	podLabels[vmpod.LabelComponent] = vmpod.ComponentRunner
	pod := corev1.PodSpec{
		TerminationGracePeriodSeconds: ptr.To(*v.PowerdownTimeout + graceMargin),
		EnableServiceLinks:            ptr.To(false),
		ServiceAccountName:            r.account(),
		NodeName:                      vm.Spec.NodeName,
		NodeSelector:                  vm.Spec.NodeSelector,
		Affinity:                      vm.Spec.Affinity,
		Containers:                    []corev1.Container{r.container()},
		Volumes:                       r.volumes(cloudInit),
	}
	if c := r.importer(); c != nil {
		pod.InitContainers = append(r.fetchers(), *c)
		if len(pod.InitContainers) > 1 {
			pod.Volumes = append(pod.Volumes, corev1.Volume{Name: VolumeImportBin, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		}
		pod.Volumes = append(pod.Volumes, corev1.Volume{Name: VolumeImportScratch, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	}
	if hasTap(v) {
		// A tap device joins a bridge of the host.
		pod.HostNetwork = true
		pod.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	} else {
		restrict(&pod)
	}
	return &appsv1.StatefulSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "StatefulSet"},
		ObjectMeta: r.meta(vm.Name),
		Spec: appsv1.StatefulSetSpec{
			Replicas:    &replicas,
			ServiceName: vm.Name,
			Selector:    &metav1.LabelSelector{MatchLabels: SelectorLabels(vm.Name)},
			// A template change must never restart a running VM.
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
			// Disks outlive the VM.
			PersistentVolumeClaimRetentionPolicy: &appsv1.StatefulSetPersistentVolumeClaimRetentionPolicy{
				WhenDeleted: appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
				WhenScaled:  appsv1.RetainPersistentVolumeClaimRetentionPolicyType,
			},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      podLabels,
					Annotations: map[string]string{AnnotationRestartHash: restartHash},
				},
				Spec: pod,
			},
			VolumeClaimTemplates: r.volumeClaimTemplates(),
		},
	}
}

func (r *renderer) container() corev1.Container {
	s, v := &r.vm.Spec, &r.vm.Spec.VM
	c := corev1.Container{
		Name:            ContainerRunner,
		Image:           image(s.Image),
		ImagePullPolicy: s.Image.PullPolicy,
		// The runner's last log lines explain a crash in the pod's status,
		// where the operator reports them.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		// Kept only with a tap NIC (restrict replaces it otherwise):
		// qemu's setuid bridge helper joins the tap to a bridge of the
		// host, which takes root and the host's network.
		SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
		// Ready while qemu runs the VM, so that a runner restarted after
		// a failure counts as failing until its VM runs again, and the
		// StatefulSet's readyReplicas (GitOps tools' health) means a VM.
		ReadinessProbe: &corev1.Probe{
			ProbeHandler:     corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: nodeagent.ReadinessCommand}},
			PeriodSeconds:    5,
			TimeoutSeconds:   5,
			FailureThreshold: 2,
		},
		// A runner that stops answering (stopped, or its loop stuck for
		// minutes) cannot manage or shut down its VM: after three probes
		// without an answer the kubelet kills it (the probe's short grace:
		// it would not act on SIGTERM) and starts the VM again, and its
		// Unhealthy event says why (the probe's own 5 s timeout ends
		// first). The delay covers qemu's start, before the runner answers.
		LivenessProbe: &corev1.Probe{
			ProbeHandler:                  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: nodeagent.LivenessCommand}},
			InitialDelaySeconds:           60,
			PeriodSeconds:                 10,
			TimeoutSeconds:                10,
			FailureThreshold:              3,
			TerminationGracePeriodSeconds: ptr.To[int64](10),
		},
		VolumeMounts: []corev1.VolumeMount{
			{Name: VolumeConfig, MountPath: vmpod.ConfigDir, ReadOnly: true},
			{Name: VolumeRunnerData, MountPath: vmpod.DataDir},
		},
	}
	if usesImageRepository(v) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeImageRepository, MountPath: vmpod.ImageRepositoryDir, ReadOnly: true})
	}
	for i, d := range v.Disks {
		if d.VolumeClaimTemplate != nil {
			attachDisk(&c, v.DiskName(i), d.VolumeClaimTemplate)
		}
	}
	if d := v.Display; d != nil && d.Spice != nil {
		c.Ports = []corev1.ContainerPort{{Name: PortSpice, ContainerPort: *d.Spice.Port, Protocol: corev1.ProtocolTCP}}
	}
	if s.Resources != nil {
		c.Resources = *s.Resources
	} else {
		// From the maxima, not the current values: the VM may grow to them
		// live, and a pod's requests change only when it is recreated, so
		// current values would make every live change a template change.
		cpu := resource.NewMilliQuantity(int64(*v.MaximumCPUs)*1000/cpuOvercommit, resource.DecimalSI)
		// Whole MiB read better than a byte count.
		mem := resource.NewQuantity(int64(float64(v.MaximumRAM.Bytes())/ramOvercommit)>>20<<20, resource.BinarySI)
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *cpu, corev1.ResourceMemory: *mem}
	}
	return c
}

// hasTap tells whether a NIC of the VM is a tap device on a host bridge.
func hasTap(v *v1.VMSpec) bool {
	for _, n := range v.Networks {
		if n.Tap != nil {
			return true
		}
	}
	return false
}

// restrict makes pod, of a VM without a tap NIC, pass Pod Security
// restricted: its containers run as nodeagent.RunnerUID, without any
// capability. The runner requests the node agent's resource, which gives
// it /dev/kvm and the network devices (a node without the agent takes no
// such pod); it and the import ask the agent, through the socket in
// nodeagent.Volume, to own their block devices and (the runner) to set up
// the pod network.
func restrict(pod *corev1.PodSpec) {
	pod.SecurityContext = RestrictedPod()
	pod.Volumes = append(pod.Volumes, NodeAgentVolume())
	for _, cs := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range cs {
			c := &cs[i]
			c.SecurityContext = RestrictedContainer()
			switch c.Name {
			case ContainerRunner:
				// A copy: spec.resources may be the user's.
				c.Resources = *c.Resources.DeepCopy()
				if c.Resources.Limits == nil {
					c.Resources.Limits = corev1.ResourceList{}
				}
				// An extended resource is asked for by its limit; a
				// request, when given, must equal it.
				c.Resources.Limits[nodeagent.Resource] = resource.MustParse("1")
				if _, ok := c.Resources.Requests[nodeagent.Resource]; ok {
					c.Resources.Requests[nodeagent.Resource] = resource.MustParse("1")
				}
				AskNodeAgent(c)
			case ContainerImport:
				AskNodeAgent(c)
			}
		}
	}
}

// RestrictedContainer is the security context of a container in a pod of
// Pod Security level restricted (the pod's context sets the user).
func RestrictedContainer() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
}

// RestrictedPod is the security context of a pod of Pod Security level
// restricted whose containers run as vm-runner's user.
func RestrictedPod() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{
		RunAsNonRoot: ptr.To(true),
		RunAsUser:    ptr.To[int64](nodeagent.RunnerUID),
		RunAsGroup:   ptr.To[int64](nodeagent.RunnerUID),
		// OnRootMismatch: runner data written by an older, root runner
		// becomes the runner's on its next start, and only then.
		FSGroup:             ptr.To[int64](nodeagent.RunnerUID),
		FSGroupChangePolicy: ptr.To(corev1.FSGroupChangeOnRootMismatch),
		SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// NodeAgentVolume is the emptyDir where a pod's containers offer the
// node agent their socket.
func NodeAgentVolume() corev1.Volume {
	return corev1.Volume{Name: nodeagent.Volume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}
}

// AskNodeAgent gives c the node agent's socket directory (the pod's
// nodeagent.Volume) and tells it the socket's path.
func AskNodeAgent(c *corev1.Container) {
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: nodeagent.Volume, MountPath: nodeagent.Dir})
	// path, not filepath: a path in the container, wherever render runs.
	c.Env = append(c.Env, corev1.EnvVar{Name: nodeagent.EnvSocket, Value: path.Join(nodeagent.Dir, nodeagent.Socket)})
}

// importer is the init container that fills the disks that name a source
// image, while they are empty and once only (vm-runner import), before
// the runner starts qemu; nil without such disks. It stages a download in
// an emptyDir, so neither memory nor the root file system holds an image,
// and it needs no privilege: only the disks it fills.
func (r *renderer) importer() *corev1.Container {
	s, v := &r.vm.Spec, &r.vm.Spec.VM
	c := corev1.Container{
		Name:            ContainerImport,
		Image:           image(s.Image),
		ImagePullPolicy: s.Image.PullPolicy,
		Args:            []string{"import"},
		// Its last words (the disk and the cause) reach the VM's status.
		TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
		VolumeMounts: []corev1.VolumeMount{
			{Name: VolumeConfig, MountPath: vmpod.ConfigDir, ReadOnly: true},
			{Name: VolumeRunnerData, MountPath: vmpod.DataDir},
			{Name: VolumeImportScratch, MountPath: vmpod.ImportScratchDir},
		},
	}
	filled := 0
	for i, d := range v.Disks {
		if d.Source != nil && d.VolumeClaimTemplate != nil {
			attachDisk(&c, v.DiskName(i), d.VolumeClaimTemplate)
			filled++
		}
	}
	if filled == 0 {
		return nil
	}
	if usesImageRepository(v) {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: VolumeImageRepository, MountPath: vmpod.ImageRepositoryDir, ReadOnly: true})
	}
	return &c
}

// fetchers are the init containers that put the containerDisk sources
// where the import reads them (runnerconfig.ContainerDiskFile), before
// it: the first copies the runner image's vm-runner (a static program)
// into an emptyDir, then one per such disk runs it in the disk's image,
// which has no program of its own. None without containerDisk sources.
// The node pulls the disk's image as any other, with its pull secrets.
func (r *renderer) fetchers() []corev1.Container {
	s, v := &r.vm.Spec, &r.vm.Spec.VM
	bin := path.Join(vmpod.ImportBinDir, "vm-runner")
	var cs []corev1.Container
	for i, d := range v.Disks {
		if d.Source == nil || d.Source.ContainerDisk == "" || d.VolumeClaimTemplate == nil {
			continue
		}
		if cs == nil {
			cs = append(cs, corev1.Container{
				Name:                     ContainerImportBin,
				Image:                    image(s.Image),
				ImagePullPolicy:          s.Image.PullPolicy,
				Args:                     []string{"copy-self", bin},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
				VolumeMounts:             []corev1.VolumeMount{{Name: VolumeImportBin, MountPath: vmpod.ImportBinDir}},
			})
		}
		name := v.DiskName(i)
		cs = append(cs, corev1.Container{
			Name:  ContainerFetch + strconv.Itoa(i),
			Image: d.Source.ContainerDisk,
			Command: []string{bin, "disk", "fetch", "--disk", name, "--to", runnerconfig.ContainerDiskFile(name),
				"--records", runnerconfig.ImportRecords(vmpod.DataDir)},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			VolumeMounts: []corev1.VolumeMount{
				{Name: VolumeImportBin, MountPath: vmpod.ImportBinDir, ReadOnly: true},
				{Name: VolumeRunnerData, MountPath: vmpod.DataDir, ReadOnly: true},
				{Name: VolumeImportScratch, MountPath: vmpod.ImportScratchDir},
			},
		})
	}
	return cs
}

// attachDisk gives c the claim of the disk whose volume is called name:
// a Block volume as the device /dev/<name>, a Filesystem one mounted on
// the directory of its image file (runnerconfig.DiskFile).
func attachDisk(c *corev1.Container, name string, t *v1.VolumeClaimTemplate) {
	if FileDiskSize(t.Spec) > 0 {
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: name, MountPath: path.Dir(runnerconfig.DiskFile(name))})
		return
	}
	c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: name, DevicePath: "/dev/" + name})
}

// FileDiskSize is the size of the claim spec when its disk is an image
// file on it (volumeMode Filesystem), 0 for a Block claim (the default):
// the size the file is made at. Validation makes sure of a positive one.
func FileDiskSize(spec corev1.PersistentVolumeClaimSpec) int64 {
	if ptr.Deref(spec.VolumeMode, corev1.PersistentVolumeBlock) != corev1.PersistentVolumeFilesystem {
		return 0
	}
	size := spec.Resources.Requests[corev1.ResourceStorage]
	return size.Value()
}

func image(im *v1.Image) string {
	if im.Source != "" {
		return im.Source
	}
	ref := im.Path
	if im.Repository != "" {
		ref = im.Repository + "/" + ref
	}
	if im.Version != "" {
		ref += ":" + im.Version
	}
	return ref
}

// usesImageRepository: CD images and disk sources may be files of the
// image repository. Any CD drive needs it, an empty one too: its medium
// changes live (kubectl vm cdrom insert), and a pod's volumes only when
// the VM restarts.
func usesImageRepository(v *v1.VMSpec) bool {
	for _, d := range v.Disks {
		if d.CDROM != nil || d.Source != nil && d.Source.File != "" {
			return true
		}
	}
	return false
}

// volumes: the config directory is one projected volume of the runner's
// ConfigMap, the display Secret (optional: a VM may have none) and the
// cloud-init Secret, so that the runner watches a single directory.
func (r *renderer) volumes(cloudInit *corev1.Secret) []corev1.Volume {
	vm := r.vm
	display := r.opts.DisplaySecret
	if display == "" {
		display = DisplaySecretName(vm.Name)
	}
	sources := []corev1.VolumeProjection{
		{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: vm.Name},
			Items:                []corev1.KeyToPath{{Key: vmpod.ConfigFile, Path: vmpod.ConfigFile}},
		}},
		{Secret: &corev1.SecretProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: display},
			Items: []corev1.KeyToPath{
				{Key: vmpod.DisplayPasswordFile, Path: vmpod.DisplayPasswordFile},
				{Key: vmpod.PasswordExpiryFile, Path: vmpod.PasswordExpiryFile},
			},
			Optional: ptr.To(true),
		}},
	}
	if cloudInit != nil {
		p := &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: cloudInit.Name}}
		for _, k := range cloudInitFiles {
			if _, ok := cloudInit.Data[k]; ok {
				p.Items = append(p.Items, corev1.KeyToPath{Key: k, Path: vmpod.CloudInitDir + "/" + k})
			}
		}
		sources = append(sources, corev1.VolumeProjection{Secret: p})
	}
	vols := []corev1.Volume{{Name: VolumeConfig, VolumeSource: corev1.VolumeSource{
		Projected: &corev1.ProjectedVolumeSource{Sources: sources},
	}}}
	if usesImageRepository(&vm.Spec.VM) {
		vols = append(vols, corev1.Volume{Name: VolumeImageRepository, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ImageRepositoryClaim, ReadOnly: true},
		}})
	}
	return vols
}

// volumeClaimTemplates: the runner's data (firmware variables, TPM state,
// machine uuid) and one per disk. The StatefulSet controller names the
// PVCs "<template>-<vm>-0" and never deletes them.
func (r *renderer) volumeClaimTemplates() []corev1.PersistentVolumeClaim {
	vm, v := r.vm, &r.vm.Spec.VM
	pvcs := []corev1.PersistentVolumeClaim{{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
		ObjectMeta: metav1.ObjectMeta{Name: VolumeRunnerData, Labels: Labels(vm.Name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  ptr.To(corev1.PersistentVolumeFilesystem),
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse("1Mi"),
			}},
		},
	}}
	for i, d := range v.Disks {
		t := d.VolumeClaimTemplate
		if t == nil {
			continue
		}
		// The VM's labels win: they find a VM's disks.
		labels := map[string]string{}
		maps.Copy(labels, t.Metadata.Labels)
		maps.Copy(labels, Labels(vm.Name))
		pvcs = append(pvcs, corev1.PersistentVolumeClaim{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolumeClaim"},
			ObjectMeta: metav1.ObjectMeta{Name: v.DiskName(i), Labels: labels, Annotations: t.Metadata.Annotations},
			Spec:       *t.Spec.DeepCopy(),
		})
	}
	return pvcs
}

// service exposes the SPICE port. Labels and annotations of the manifest
// are merged over the VM's labels; a null value removes a key.
func (r *renderer) service() *corev1.Service {
	vm, lb := r.vm, r.vm.Spec.LoadBalancerService
	d := vm.Spec.VM.Display
	if lb == nil || d == nil || d.Spice == nil {
		return nil
	}
	meta := r.meta(vm.Name)
	merge(meta.Labels, lb.Labels)
	if len(lb.Annotations) > 0 {
		meta.Annotations = map[string]string{}
		merge(meta.Annotations, lb.Annotations)
	}
	port := *d.Spice.Port
	return &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeLoadBalancer,
			Selector: SelectorLabels(vm.Name),
			Ports: []corev1.ServicePort{{
				Name: PortSpice, Port: port, Protocol: corev1.ProtocolTCP,
				TargetPort: intstr.FromString(PortSpice),
			}},
		},
	}
}

// RunnerAccount names what kubectl vm render writes for a VM's runner
// with ConfigAccess: its Role, RoleBinding and, when no ServiceAccount is
// named, its ServiceAccount.
func RunnerAccount(vm string) string { return vm + "-runner" }

// account is the runner pod's ServiceAccount; empty for the namespace's
// default.
func (r *renderer) account() string {
	if r.opts.ServiceAccount == "" && r.configAccess() {
		return RunnerAccount(r.vm.Name)
	}
	return r.opts.ServiceAccount
}

// configAccess tells whether the runner gets access to its ConfigMap: as
// asked, when the VM's namespace is known, which its RoleBinding names
// (docs/runner.md says so; a warning on every VM applied with
// kubectl apply -n would be noise).
func (r *renderer) configAccess() bool { return r.opts.ConfigAccess && r.vm.Namespace != "" }

// runnerAccess lets the runner's account get and watch the VM's ConfigMap
// by name (a watch with resourceNames must select metadata.name, as the
// runner's does): nothing else, and no Secret.
func (r *renderer) runnerAccess() (*corev1.ServiceAccount, *rbacv1.Role, *rbacv1.RoleBinding) {
	name := RunnerAccount(r.vm.Name)
	var sa *corev1.ServiceAccount
	if r.opts.ServiceAccount == "" {
		sa = &corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: r.meta(name),
		}
	}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: r.meta(name),
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"},
			ResourceNames: []string{r.vm.Name}, Verbs: []string{"get", "watch"},
		}},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: r.meta(name),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: r.account(), Namespace: r.vm.Namespace}},
	}
	return sa, role, binding
}

// disruptionBudget, for a VM whose drain waits, allows no eviction of the
// VM's pod: a drain of its node stops there until a person stops the VM.
func (r *renderer) disruptionBudget() *policyv1.PodDisruptionBudget {
	if !r.annotations.drainWaits {
		return nil
	}
	return &policyv1.PodDisruptionBudget{
		TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
		ObjectMeta: r.meta(r.vm.Name),
		Spec: policyv1.PodDisruptionBudgetSpec{
			MaxUnavailable: ptr.To(intstr.FromInt32(0)),
			Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(r.vm.Name)},
		},
	}
}

func merge(dst map[string]string, src map[string]*string) {
	for k, v := range src {
		if v == nil {
			delete(dst, k)
		} else {
			dst[k] = *v
		}
	}
}

// specView picks the part of a spec that an object depends on.
type specView func(v1.VirtualMachineSpec) v1.VirtualMachineSpec

// templateSpec is what the StatefulSet depends on: all but the Service and
// what the runner applies live from its ConfigMap (CPUs, RAM, CD media,
// the serial console's copy to the pod log).
func templateSpec(s v1.VirtualMachineSpec) v1.VirtualMachineSpec {
	s.LoadBalancerService = nil
	s.VM.CurrentCPUs, s.VM.CurrentRAM = nil, ""
	s.VM.SerialConsole = nil
	disks := make([]v1.Disk, len(s.VM.Disks))
	for i, d := range s.VM.Disks {
		if d.CDROM != nil {
			d.CDROM = &v1.CDROM{}
		}
		disks[i] = d
	}
	s.VM.Disks = disks
	return s
}

// restartSpec is what applies only when the VM starts: also not the
// desired state, nor powerdownTimeout (the runner reads it live).
func restartSpec(s v1.VirtualMachineSpec) v1.VirtualMachineSpec {
	s = templateSpec(s)
	s.VM.State, s.VM.PowerdownTimeout = "", nil
	return s
}

// specHash hashes the view of the spec with the name, namespace, options
// and Version, which all objects depend on.
func (r *renderer) specHash(view specView) (string, error) {
	opts := r.opts
	opts.ConfigAccess = r.configAccess() // as it takes effect
	b, err := json.Marshal(struct {
		Name, Namespace string
		Options         Options
		Spec            v1.VirtualMachineSpec
	}{r.vm.Name, r.vm.Namespace, opts, view(r.vm.Spec)})
	if err != nil {
		return "", fmt.Errorf("%s: %w", r.vm.Name, err)
	}
	return hashOf(b), nil
}

// hashOf hashes Version and the parts, each length-prefixed so that
// moving bytes between parts changes the hash.
func hashOf(parts ...[]byte) string {
	h := sha256.New()
	h.Write([]byte(Version))
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
