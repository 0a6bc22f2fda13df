// Package runnerconfig is the runner's config file: the format that
// VM-Operator's runner reads (a top-level "/Runner" key), written by
// pkg/render into each VM's ConfigMap and read by vm-runner. Keeping one
// definition for both sides means they cannot drift apart.
//
// In a pod, cloud-init data is not in this file (it holds passwords and
// keys, and the file is a ConfigMap): it is projected from the VM's
// cloud-init Secret into the directory CloudInitDir next to the file.
package runnerconfig

import (
	"path"
	"strconv"
	"strings"

	"github.com/vmop/vmop/pkg/vmpod"
)

// File is the whole config file.
type File struct {
	Runner Config `json:"/Runner"`
}

// Config is what the "/Runner" key holds.
type Config struct {
	Template           string     `json:"template,omitempty"`
	UpdateTemplate     bool       `json:"updateTemplate,omitempty"`
	DataDir            string     `json:"dataDir,omitempty"`
	RuntimeDir         string     `json:"runtimeDir,omitempty"`
	GuestShutdownStops bool       `json:"guestShutdownStops,omitempty"`
	CloudInit          *CloudInit `json:"cloudInit,omitempty"`
	// ResetCounter: each increase resets the guest.
	ResetCounter int64 `json:"resetCounter,omitempty"`
	VM           VM    `json:"vm"`
}

// CloudInit is NoCloud data given inline (stand-alone use).
type CloudInit struct {
	MetaData      map[string]any `json:"metaData,omitempty"`
	UserData      any            `json:"userData,omitempty"`
	NetworkConfig map[string]any `json:"networkConfig,omitempty"`
}

// VM describes the machine. Sizes of RAM are bytes.
type VM struct {
	Name             string    `json:"name"`
	UUID             string    `json:"uuid,omitempty"`
	UseTPM           bool      `json:"useTpm,omitempty"`
	Firmware         string    `json:"firmware,omitempty"`
	BootMenu         bool      `json:"bootMenu,omitempty"`
	PowerdownTimeout *int64    `json:"powerdownTimeout,omitempty"`
	MaximumRAM       Size      `json:"maximumRam,omitempty"`
	CurrentRAM       Size      `json:"currentRam,omitempty"`
	CPUModel         string    `json:"cpuModel,omitempty"`
	MaximumCPUs      int32     `json:"maximumCpus,omitempty"`
	CurrentCPUs      int32     `json:"currentCpus,omitempty"`
	Sockets          int32     `json:"sockets,omitempty"`
	DiesPerSocket    int32     `json:"diesPerSocket,omitempty"`
	CoresPerDie      int32     `json:"coresPerDie,omitempty"`
	ThreadsPerCore   int32     `json:"threadsPerCore,omitempty"`
	Accelerator      string    `json:"accelerator,omitempty"`
	RTCBase          string    `json:"rtcBase,omitempty"`
	RTCClock         string    `json:"rtcClock,omitempty"`
	Network          []Network `json:"network,omitempty"`
	Drives           []Drive   `json:"drives,omitempty"`
	Display          *Display  `json:"display,omitempty"`
	// SerialConsole is a vmop addition; the Java runner ignores it.
	SerialConsole *SerialConsole `json:"serialConsole,omitempty"`
}

// SerialConsole is what the runner does with the guest's serial output
// beyond keeping its last part in the runtime directory.
type SerialConsole struct {
	// PodLog copies the output, line by line, to the runner's stdout. It
	// changes live.
	PodLog bool `json:"podLog,omitempty"`
}

// PodLog tells whether the serial console goes to the pod log.
func (v *VM) PodLog() bool { return v.SerialConsole != nil && v.SerialConsole.PodLog }

// Network types. NetworkPod is vmop's: the Java runner has no such type.
const (
	NetworkTap  = "tap"
	NetworkUser = "user"
	NetworkPod  = "pod"
)

// Network is one NIC. Net is the guest's network of a user or pod one;
// Ports are the only ports a pod network passes to the guest (all but the
// pod's own when empty).
type Network struct {
	Type   string `json:"type"`
	Device string `json:"device,omitempty"`
	Bridge string `json:"bridge,omitempty"`
	Net    string `json:"net,omitempty"`
	MAC    string `json:"mac,omitempty"`
	Ports  []Port `json:"ports,omitempty"`
}

// PodNetwork is the VM's pod network, nil without one.
func (v *VM) PodNetwork() *Network {
	for i := range v.Network {
		if v.Network[i].Type == NetworkPod {
			return &v.Network[i]
		}
	}
	return nil
}

// Port is a port of the pod that a pod network passes to the guest.
type Port struct {
	Port     int    `json:"port"`
	Protocol string `json:"protocol,omitempty"` // TCP (when empty) or UDP
}

// String is the port as Kubernetes writes it: 22/TCP.
func (p Port) String() string { return strconv.Itoa(p.Port) + "/" + p.Protocol }

// JoinPorts lists ports as Kubernetes writes them: 22/TCP, 53/UDP.
func JoinPorts(ports []Port) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}

// OwnPorts are the ports the pod itself serves, SPICE's, which a pod
// network keeps from the guest.
func (v *VM) OwnPorts() []Port {
	if d := v.Display; d != nil && d.Spice != nil {
		return []Port{{Port: int(d.Spice.Port), Protocol: "TCP"}}
	}
	return nil
}

// Drive types.
const (
	DriveCDROM = "ide-cd"
	DriveRaw   = "raw"
)

// Drive is a disk or CD drive. Resource is a block device or file; File
// is a CD image path or URL, absent for an empty drive.
type Drive struct {
	Type      string `json:"type"`
	Bootindex *int32 `json:"bootindex,omitempty"`
	Resource  string `json:"resource,omitempty"`
	Device    string `json:"device,omitempty"`
	File      string `json:"file,omitempty"`
	// ClaimSize is a vmop addition, set when Resource is a raw image file
	// on a Filesystem claim of that many bytes: the file is made when
	// missing and grown when the claim grew (see pkg/vm-runner/diskfile).
	ClaimSize int64 `json:"claimSize,omitempty"`
	// Source is a vmop addition (the Java runner ignores it): the image
	// that vm-runner import puts on an empty Resource before the VM's
	// first start.
	Source *DriveSource `json:"source,omitempty"`
}

// ImportRecords is the directory of the import records under dataDir.
func ImportRecords(dataDir string) string { return path.Join(dataDir, vmpod.ImportRecordDir) }

// RecordName names the drive's disk in the import records: its volume
// name, as kubectl vm disk upload names it too. Render puts a Block
// volume at /dev/<name> and a Filesystem one's file at DiskFile(<name>).
func (d Drive) RecordName() string {
	if d.ClaimSize > 0 {
		return path.Base(path.Dir(d.Resource))
	}
	return path.Base(d.Resource)
}

// DiskFile is where a pod has the image file of the disk whose
// Filesystem volume is called volume.
func DiskFile(volume string) string { return path.Join(vmpod.DiskFilesDir, volume, vmpod.DiskFileName) }

// DriveSource is an image to import: URL (http or https) or File (a path
// in the runner's file system), and its "sha256:<hex>" or "sha512:<hex>"
// checksum. With ContainerDisk (an image reference), File is where an
// init container of that image put the image's disk (ContainerDiskFile),
// and ContainerDisk names the source.
type DriveSource struct {
	URL           string `json:"url,omitempty"`
	File          string `json:"file,omitempty"`
	ContainerDisk string `json:"containerDisk,omitempty"`
	Checksum      string `json:"checksum,omitempty"`
}

// ContainerDiskFile is where the containerDisk of the disk whose volume is
// called volume is put for the import.
func ContainerDiskFile(volume string) string {
	return path.Join(vmpod.ImportScratchDir, volume+".containerdisk")
}

// Display holds the graphical outputs.
type Display struct {
	Outputs      int32  `json:"outputs,omitempty"`
	LoggedInUser string `json:"loggedInUser,omitempty"`
	Spice        *Spice `json:"spice,omitempty"`
}

// Spice is the SPICE server.
type Spice struct {
	Port           int32  `json:"port"`
	UsbRedirects   int32  `json:"usbRedirects"`
	StreamingVideo string `json:"streamingVideo,omitempty"`
	// WithoutPassword runs SPICE without ticketing, open to anyone who
	// reaches its port. Without it the display stays locked until a
	// password is set, even when the runner starts without one.
	WithoutPassword bool `json:"withoutPassword,omitempty"`
}
