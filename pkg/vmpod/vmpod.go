// Package vmpod is what a VM pod is, as those who make it (pkg/render,
// kubectl vm's uploader) and those who serve it (vm-runner, vm-node's
// agent) agree: the labels that mark it and the paths in its runner's
// container. It imports nothing, so that the privileged agent links no
// renderer to know them.
package vmpod

// The labels of what vmop renders; a VM pod has them all.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelComponent = "app.kubernetes.io/component"

	NameRunner      = "vm-runner"
	ManagedBy       = "vm-operator"
	ComponentRunner = "vm-runner"
	// ComponentDisplaySecret marks the Secret that holds a VM's display
	// password (VM-Operator's convention).
	ComponentDisplaySecret = "display-secret"
)

// Paths inside the runner's pod.
const (
	ConfigDir    = "/etc/opt/vmrunner"
	ConfigFile   = "config.yaml"
	CloudInitDir = "cloud-init"
	DataDir      = "/var/local/vm-data"
	// DataVolume names the claim template of DataDir's volume: the pod's
	// claim is DataVolume-<pod>.
	DataVolume = "runner-data"
	// ImageRepositoryDir holds CD images named by a relative path.
	ImageRepositoryDir = "/var/local/vmop-image-repository"
	// ImportScratchDir is where an import stages its source (an emptyDir
	// of the pod: never the container's root file system).
	ImportScratchDir = "/var/local/vmop-import"
	// ImportBinDir holds a copy of vm-runner (static) for the init
	// containers that run in a containerDisk's image, which has no
	// program of its own.
	ImportBinDir = "/var/local/vmop-bin"
	// ContainerDiskDir is where a containerDisk image keeps its disk.
	ContainerDiskDir = "/disk"
	// ImportRecordDir, under the data directory (the VM's runner-data
	// claim), records the disks filled from an image: they are never
	// filled again.
	ImportRecordDir = "disk-imports"
	// DiskFilesDir holds the Filesystem claims of the VM's disks, one
	// directory each, named after the disk's volume, with the disk in
	// DiskFileName.
	DiskFilesDir = "/var/local/vmop-disks"
	// DiskFileName is a disk's raw image file on a Filesystem claim
	// (KubeVirt's name, so that a claim moves between the two).
	DiskFileName = "disk.img"
	// DisplayPasswordFile and PasswordExpiryFile come from the display
	// Secret's keys of the same names.
	DisplayPasswordFile = "display-password"
	PasswordExpiryFile  = "password-expiry"
)
