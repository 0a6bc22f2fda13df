package agent

// Pod is what the agent reads of a pod, decoded from the API's JSON: the
// fields it selects pods by, trusts them by (trust.go) and reports on,
// named as in k8s.io/api/core/v1. The rest of a pod is not decoded, so
// that the agent links no API types (its weight is its binary's).
type Pod struct {
	ObjectMeta `json:"metadata"`
	Spec       PodSpec   `json:"spec"`
	Status     PodStatus `json:"status"`
}

// ObjectMeta is a pod's metadata.
type ObjectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	UID       string            `json:"uid"`
	Labels    map[string]string `json:"labels"`
}

// present decodes a JSON object whose fields the agent does not read,
// only whether it is there.
type present struct{}

// PodSpec is a pod's spec.
type PodSpec struct {
	HostNetwork           bool                 `json:"hostNetwork"`
	HostPID               bool                 `json:"hostPID"`
	HostIPC               bool                 `json:"hostIPC"`
	ShareProcessNamespace *bool                `json:"shareProcessNamespace"`
	Volumes               []Volume             `json:"volumes"`
	InitContainers        []Container          `json:"initContainers"`
	Containers            []Container          `json:"containers"`
	EphemeralContainers   []EphemeralContainer `json:"ephemeralContainers"`
}

// Volume is a pod's volume: only whether it is a host path or an emptyDir.
type Volume struct {
	Name     string   `json:"name"`
	HostPath *present `json:"hostPath"`
	EmptyDir *present `json:"emptyDir"`
}

// Container is a container of a pod's spec.
type Container struct {
	Name            string           `json:"name"`
	Image           string           `json:"image"`
	Command         []string         `json:"command"`
	Args            []string         `json:"args"`
	WorkingDir      string           `json:"workingDir"`
	Env             []EnvVar         `json:"env"`
	EnvFrom         []present        `json:"envFrom"`
	VolumeMounts    []VolumeMount    `json:"volumeMounts"`
	VolumeDevices   []VolumeDevice   `json:"volumeDevices"`
	LivenessProbe   *Probe           `json:"livenessProbe"`
	ReadinessProbe  *Probe           `json:"readinessProbe"`
	StartupProbe    *Probe           `json:"startupProbe"`
	Lifecycle       *present         `json:"lifecycle"`
	SecurityContext *SecurityContext `json:"securityContext"`
}

// EphemeralContainer is a container added to a running pod.
type EphemeralContainer struct {
	Container
	TargetContainerName string `json:"targetContainerName"`
}

// EnvVar is a variable of a container's environment.
type EnvVar struct {
	Name      string   `json:"name"`
	Value     string   `json:"value"`
	ValueFrom *present `json:"valueFrom"`
}

// VolumeMount is where a container mounts a volume.
type VolumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
}

// VolumeDevice is where a container has a block volume.
type VolumeDevice struct {
	Name       string `json:"name"`
	DevicePath string `json:"devicePath"`
}

// Probe is a container's probe: only the command it may run.
type Probe struct {
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec"`
}

// SecurityContext is a container's security context: only what makes it
// privileged.
type SecurityContext struct {
	Privileged   *bool `json:"privileged"`
	Capabilities *struct {
		Add []string `json:"add"`
	} `json:"capabilities"`
}

// PodStatus is a pod's status.
type PodStatus struct {
	Phase                 string            `json:"phase"`
	Conditions            []PodCondition    `json:"conditions"`
	InitContainerStatuses []ContainerStatus `json:"initContainerStatuses"`
	ContainerStatuses     []ContainerStatus `json:"containerStatuses"`
}

// PodCondition is a condition of a pod's status.
type PodCondition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// ContainerStatus is what runs in a container: the image as the runtime
// names it, its digest, and whether it runs.
type ContainerStatus struct {
	Name    string `json:"name"`
	Image   string `json:"image"`
	ImageID string `json:"imageID"`
	State   struct {
		Running *present `json:"running"`
	} `json:"state"`
}

// ready tells whether the pod's Ready condition is True.
func (p *Pod) ready() bool {
	for _, c := range p.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}
