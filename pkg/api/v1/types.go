package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VirtualMachine is one qemu VM run by a runner in a pod.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type VirtualMachine struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   VirtualMachineSpec   `json:"spec"`
	Status VirtualMachineStatus `json:"status,omitempty"`
}

// VirtualMachineList is a list of VirtualMachines.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
type VirtualMachineList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []VirtualMachine `json:"items"`
}

// VirtualMachineSpec is everything about the pod that runs the VM, with the
// VM itself under VM.
type VirtualMachineSpec struct {
	// Image is the runner image.
	Image *Image `json:"image,omitempty"`
	// GuestShutdownStops makes a shutdown from inside the guest set the
	// desired state to Stopped instead of letting the pod restart the VM.
	GuestShutdownStops bool `json:"guestShutdownStops,omitempty"`
	// CloudInit is NoCloud data for the guest.
	CloudInit *CloudInit `json:"cloudInit,omitempty"`
	// Resources replaces the pod resources derived from CPUs and RAM.
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// NodeName, NodeSelector and Affinity are copied to the pod.
	NodeName     string            `json:"nodeName,omitempty"`
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	Affinity     *corev1.Affinity  `json:"affinity,omitempty"`
	// RunnerTemplate selects the qemu command template of the runner.
	RunnerTemplate *RunnerTemplate `json:"runnerTemplate,omitempty"`
	// LoadBalancerService, when present, makes the SPICE port reachable
	// through a Service of type LoadBalancer.
	LoadBalancerService *LoadBalancerService `json:"loadBalancerService,omitempty"`

	// Permissions, Pools and LoggingProperties serve only VM-Operator's web
	// GUI and Java runner. They are accepted so that its manifests validate,
	// and ignored with a warning.
	Permissions       []Permission `json:"permissions,omitempty"`
	Pools             []string     `json:"pools,omitempty"`
	LoggingProperties string       `json:"loggingProperties,omitempty"`

	// VM describes the virtual machine.
	VM VMSpec `json:"vm"`
}

// Image names the runner image, either as one reference (Source) or in
// parts (Repository/Path:Version).
type Image struct {
	Source     string            `json:"source,omitempty"`
	Repository string            `json:"repository,omitempty"`
	Path       string            `json:"path,omitempty"`
	Version    string            `json:"version,omitempty"`
	PullPolicy corev1.PullPolicy `json:"pullPolicy,omitempty"`
}

// CloudInit holds the three NoCloud documents. Their content is passed to
// the guest as is, so it is kept as free-form JSON.
type CloudInit struct {
	MetaData      *FreeForm `json:"metaData,omitempty"`
	UserData      *FreeForm `json:"userData,omitempty"`
	NetworkConfig *FreeForm `json:"networkConfig,omitempty"`
}

// RunnerTemplate selects a template file of the runner.
type RunnerTemplate struct {
	Source string `json:"source,omitempty"`
	// Update makes the runner use the current template on every start
	// rather than the copy saved at the first start.
	Update *bool `json:"update,omitempty"`
}

// LoadBalancerService holds the labels and annotations of the Service.
// A null value removes a key that a default would set.
type LoadBalancerService struct {
	Labels      map[string]*string `json:"labels,omitempty"`
	Annotations map[string]*string `json:"annotations,omitempty"`
}

// Permission is a VM-Operator GUI permission (ignored by vmop).
type Permission struct {
	User string   `json:"user,omitempty"`
	Role string   `json:"role,omitempty"`
	May  []string `json:"may,omitempty"`
}

// VMState is the desired state of a VM.
type VMState string

const (
	StateRunning VMState = "Running"
	StateStopped VMState = "Stopped"
)

// Firmware selects how the VM boots.
type Firmware string

const (
	FirmwareBIOS     Firmware = "bios"
	FirmwareUEFI     Firmware = "uefi"
	FirmwareUEFI4M   Firmware = "uefi-4m"
	FirmwareSecure   Firmware = "secure"
	FirmwareSecure4M Firmware = "secure-4m"
)

// Firmwares lists every Firmware.
var Firmwares = []Firmware{FirmwareBIOS, FirmwareUEFI, FirmwareUEFI4M, FirmwareSecure, FirmwareSecure4M}

// VMSpec describes the virtual machine itself.
type VMSpec struct {
	State       VMState  `json:"state,omitempty"`
	MachineUUID string   `json:"machineUuid,omitempty"`
	UseTPM      bool     `json:"useTpm,omitempty"`
	Firmware    Firmware `json:"firmware,omitempty"`
	BootMenu    bool     `json:"bootMenu,omitempty"`
	// PowerdownTimeout is how many seconds a guest gets to shut down before
	// qemu is stopped hard.
	PowerdownTimeout *int64 `json:"powerdownTimeout,omitempty"`
	CPUModel         string `json:"cpuModel,omitempty"`
	MaximumCPUs      *int32 `json:"maximumCpus,omitempty"`
	// CurrentCPUs is the hot-plug target, at most MaximumCPUs.
	CurrentCPUs *int32       `json:"currentCpus,omitempty"`
	CPUTopology *CPUTopology `json:"cpuTopology,omitempty"`
	MaximumRAM  Quantity     `json:"maximumRam,omitempty"`
	// CurrentRAM is the balloon target, at most MaximumRAM.
	CurrentRAM Quantity  `json:"currentRam,omitempty"`
	RTCBase    string    `json:"rtcBase,omitempty"`
	RTCClock   string    `json:"rtcClock,omitempty"`
	Networks   []Network `json:"networks,omitempty"`
	Disks      []Disk    `json:"disks,omitempty"`
	Display    *Display  `json:"display,omitempty"`
	// SerialConsole is a vmop addition: VM-Operator has no serial console.
	SerialConsole *SerialConsole `json:"serialConsole,omitempty"`
}

// SerialConsole says what the runner does with the guest's serial port
// beyond keeping its last output and letting clients attach.
type SerialConsole struct {
	// PodLog copies the guest's output, line by line, to the pod log.
	// It applies while the VM runs.
	PodLog bool `json:"podLog,omitempty"`
}

// CPUTopology is passed to qemu's -smp; a zero value omits that part.
type CPUTopology struct {
	Sockets        int32 `json:"sockets,omitempty"`
	DiesPerSocket  int32 `json:"diesPerSocket,omitempty"`
	CoresPerDie    int32 `json:"coresPerDie,omitempty"`
	ThreadsPerCore int32 `json:"threadsPerCore,omitempty"`
}

// Network is exactly one of Tap, User or Pod.
type Network struct {
	Tap  *TapNetwork  `json:"tap,omitempty"`
	User *UserNetwork `json:"user,omitempty"`
	// Pod is vmop's own: VM-Operator has no such network.
	Pod *PodNetwork `json:"pod,omitempty"`
}

// TapNetwork attaches the VM to a bridge on the host.
type TapNetwork struct {
	Device string `json:"device,omitempty"`
	Bridge string `json:"bridge,omitempty"`
	MAC    string `json:"mac,omitempty"`
}

// UserNetwork is qemu's user-mode (slirp) network.
type UserNetwork struct {
	Device string `json:"device,omitempty"`
	Net    string `json:"net,omitempty"`
	MAC    string `json:"mac,omitempty"`
}

// PodNetwork puts the guest on its pod's network: connections to the
// pod's IP reach the guest (the pod's own ports excepted), and the guest's
// traffic leaves with the pod's IP, as KubeVirt's masquerade binding does.
// The guest gets a private address by DHCP.
type PodNetwork struct {
	Device string `json:"device,omitempty"`
	// Net is the guest's side: the guest gets its 16th address (10.0.2.15
	// by default, as on a user network), the pod its 3rd (10.0.2.2).
	Net string `json:"net,omitempty"`
	MAC string `json:"mac,omitempty"`
	// Ports, when given, are the only ones that reach the guest; else all
	// do but the pod's own (SPICE).
	Ports []PodPort `json:"ports,omitempty"`
}

// PodPort is a port of the pod's IP that reaches the same port of the guest.
type PodPort struct {
	Port int32 `json:"port"`
	// Protocol is TCP (when empty) or UDP.
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// Disk is exactly one of VolumeClaimTemplate or CDROM.
type Disk struct {
	VolumeClaimTemplate *VolumeClaimTemplate `json:"volumeClaimTemplate,omitempty"`
	CDROM               *CDROM               `json:"cdrom,omitempty"`
	Bootindex           *int32               `json:"bootindex,omitempty"`
	// Source is a vmop addition: the image that fills the claim at the
	// VM's first start.
	Source *DiskSource `json:"source,omitempty"`
}

// DiskSource is an image (qcow2 or raw, plain or compressed with gzip, xz
// or zstd) that fills a volumeClaimTemplate disk's claim once, while it is
// empty: the claim's data is never overwritten, and a changed source does
// not import again.
type DiskSource struct {
	// URL is an http or https URL.
	URL string `json:"url,omitempty"`
	// File is a path in the image repository volume.
	File string `json:"file,omitempty"`
	// ContainerDisk is a container image that holds the disk image as the
	// one file in its /disk directory (KubeVirt's containerDisk images):
	// the node pulls it as it pulls any image.
	ContainerDisk string `json:"containerDisk,omitempty"`
	// Checksum, "sha256:<hex>" or "sha512:<hex>", is verified before
	// anything is written:
	// for a ContainerDisk, of the file in /disk.
	Checksum string `json:"checksum,omitempty"`
}

// VolumeClaimTemplate is the PVC that provides a disk.
type VolumeClaimTemplate struct {
	// APIVersion and Kind are accepted for manifests that spell them out.
	APIVersion string                           `json:"apiVersion,omitempty"`
	Kind       string                           `json:"kind,omitempty"`
	Metadata   EmbeddedMetadata                 `json:"metadata,omitempty"`
	Spec       corev1.PersistentVolumeClaimSpec `json:"spec"`
}

// EmbeddedMetadata is the part of a PVC's metadata a template may set.
type EmbeddedMetadata struct {
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// CDROM is a drive with a removable medium. An empty Image is an empty
// drive; a relative path is looked up in the image repository volume; a
// URL is passed to qemu.
type CDROM struct {
	Image string `json:"image"`
}

// Display describes the VM's graphical outputs.
type Display struct {
	Outputs      *int32 `json:"outputs,omitempty"`
	LoggedInUser string `json:"loggedInUser,omitempty"`
	Spice        *Spice `json:"spice,omitempty"`
}

// Spice configures the SPICE server of the VM.
type Spice struct {
	Port *int32 `json:"port,omitempty"`
	// Server and ProxyURL are what clients are told to connect to; they do
	// not change the server.
	Server         string `json:"server,omitempty"`
	ProxyURL       string `json:"proxyUrl,omitempty"`
	UsbRedirects   *int32 `json:"usbRedirects,omitempty"`
	GenerateSecret *bool  `json:"generateSecret,omitempty"`
	StreamingVideo string `json:"streamingVideo,omitempty"`
	// Ticket is deprecated in VM-Operator; a display Secret replaces it.
	Ticket string `json:"ticket,omitempty"`
}

// VirtualMachineStatus is written by the operator and the runner.
type VirtualMachineStatus struct {
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	RunnerVersion      string             `json:"runnerVersion,omitempty"`
	CPUs               int32              `json:"cpus,omitempty"`
	RAM                string             `json:"ram,omitempty"`
	// PrintableStatus is what the VM does, in a word for a table column:
	// a failure's reason, else Paused while the guest is paused, else the
	// Running condition's reason. vm-operator writes it with the
	// conditions, so that kubectl get and kubectl vm list need only it.
	PrintableStatus string `json:"printableStatus,omitempty"`
	// TargetCPUs and TargetRAM are what the spec asks the VM to run with
	// (currentCpus and currentRam, with their defaults), written by
	// vm-operator; CPUs and RAM are what the runner reports in use.
	TargetCPUs int32  `json:"targetCpus,omitempty"`
	TargetRAM  string `json:"targetRam,omitempty"`
	// Accelerator is what runs the guest: "kvm", or "tcg" (emulated, many
	// times slower) on a node without a usable /dev/kvm.
	Accelerator           string `json:"accelerator,omitempty"`
	Node                  string `json:"node,omitempty"`
	ConsoleClient         string `json:"consoleClient,omitempty"`
	ConsoleUser           string `json:"consoleUser,omitempty"`
	LoggedInUser          string `json:"loggedInUser,omitempty"`
	DisplayPasswordSerial int64  `json:"displayPasswordSerial,omitempty"`
	// OSInfo is the guest agent's guest-get-osinfo answer, as VM-Operator
	// keeps it (id, name, pretty-name, version-id, kernel-release, ...):
	// an OSInfo, free-form so that a field the agent adds is kept.
	OSInfo *FreeForm `json:"osinfo,omitempty"`
	// Hostname, Interfaces and GuestAgentVersion come from the guest agent
	// while it is connected (the Booted condition).
	Hostname          string           `json:"hostname,omitempty"`
	Interfaces        []GuestInterface `json:"interfaces,omitempty"`
	GuestAgentVersion string           `json:"guestAgentVersion,omitempty"`
	Assignment        *Assignment      `json:"assignment,omitempty"`
}

// GuestInterface is a network interface of the guest (not loopback) as
// its agent sees it.
type GuestInterface struct {
	Name        string   `json:"name"`
	MAC         string   `json:"mac,omitempty"`
	IPAddresses []string `json:"ipAddresses,omitempty"`
}

// Assignment is VM-Operator's pool assignment (kept for compatibility).
type Assignment struct {
	Pool     string `json:"pool,omitempty"`
	User     string `json:"user,omitempty"`
	LastUsed string `json:"lastUsed,omitempty"`
}

// OSInfo is what the runner writes into status.osinfo, and the plugin
// reads: the guest agent's guest-get-osinfo answer (os-release and uname).
// +k8s:deepcopy-gen=false
type OSInfo struct {
	ID            string `json:"id,omitempty"`
	Name          string `json:"name,omitempty"`
	PrettyName    string `json:"pretty-name,omitempty"`
	Version       string `json:"version,omitempty"`
	VersionID     string `json:"version-id,omitempty"`
	KernelRelease string `json:"kernel-release,omitempty"`
	Machine       string `json:"machine,omitempty"`
}
