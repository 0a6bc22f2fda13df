package v1

// Condition types of a VirtualMachine's status that vm-operator owns; the
// runner owns its own fields (cpus, ram, consoleClient,
// displayPasswordSerial, the Booted condition). The plugin reads them.
const (
	ConditionRunning         = "Running"
	ConditionReady           = "Ready"
	ConditionRestartRequired = "RestartRequired"
	ConditionFailed          = "Failed"
	// ConditionSpecWarnings is True while the spec asks for something it
	// does not get as written (the warnings of kubectl vm render).
	ConditionSpecWarnings = "SpecWarnings"
	// ConditionStalled is Failed under the name kstatus knows (Flux's
	// health checks, Helm's --wait): True, a VM that failed fails them at
	// once rather than at their timeout.
	ConditionStalled = "Stalled"
)

// Condition types that vm-runner owns (pkg/vm-runner/reporter writes them; their
// reasons are there): named here so that readers such as the operator's
// metrics need not link the runner.
const (
	// ConditionBooted is True while the guest agent is connected.
	ConditionBooted = "Booted"
	// ConditionMediaLoaded tells whether every CD drive holds the medium
	// the spec names; a medium that cannot be opened leaves its drive
	// empty and the VM running.
	ConditionMediaLoaded = "MediaLoaded"
	// ConditionPaused is True while qemu holds the guest paused: on a
	// disk's I/O error (a full volume: the guest sees no error, and goes
	// on once the disk takes its I/O again), or after its kernel panicked
	// (until a reset).
	ConditionPaused = "Paused"
	// ConditionImported tells how the disks that name a source image were
	// filled: while it goes (False, Importing, with bytes done and total),
	// its failure (False, the cause as reason) or its end (True). vm-runner
	// import writes it.
	ConditionImported = "Imported"
)

// Reasons of the Paused condition (vm-runner's), here for readers such
// as the operator's metrics. The runner's events of the same names tell
// when a pause starts.
const (
	ReasonNotPaused = "NotPaused"
	// ReasonDiskFull: a disk's volume is full; qemu paused the guest
	// rather than fail its writes.
	ReasonDiskFull = "DiskFull"
	// ReasonDiskError: a disk's read or write failed otherwise.
	ReasonDiskError = "DiskError"
	// ReasonGuestPanicked: the guest's kernel panicked; qemu holds it.
	ReasonGuestPanicked = "GuestPanicked"
)

// Reasons of the Imported condition (a failed import's reason is its
// cause: HTTPError, ChecksumMismatch, ImageTooLarge, UnknownFormat or
// ImportFailed).
const (
	ReasonImporting = "Importing"
	ReasonImported  = "Imported"
	// ReasonDiskHeldData: a disk that names a source held data that no
	// import wrote; it is kept, not overwritten.
	ReasonDiskHeldData = "DiskHeldData"
)

// Reasons of vm-operator's conditions. The Running condition's reason is
// the VM's phase, short enough for a table column.
const (
	ReasonRunning        = "Running"
	ReasonStarting       = "Starting"
	ReasonStopping       = "Stopping"
	ReasonStopped        = "Stopped"
	ReasonPodReady       = "PodReady"
	ReasonPodNotReady    = "PodNotReady"
	ReasonRestartPending = "SpecChanged"
	ReasonUpToDate       = "UpToDate"
	ReasonInvalidSpec    = "InvalidSpec"
	// ReasonApplyFailed: the API server refused an object the VM renders
	// to (admission, quota, RBAC); the message is the API server's.
	ReasonApplyFailed     = "ApplyFailed"
	ReasonPodCreateFailed = "PodCreateFailed"
	ReasonCrashLoop       = "RunnerCrashLoop"
	ReasonQemuFailed      = "QemuFailed"
	// ReasonNetworkFailed: the runner could not set up the VM's network
	// on its node; the message says what is missing.
	ReasonNetworkFailed = "NetworkFailed"
	// ReasonMACConflict: an older VM of the namespace has a tap NIC with
	// the same MAC; nothing of the VM is applied.
	ReasonMACConflict = "MACConflict"
	// ReasonImportFailed: a disk could not be filled from its source
	// image (vm-runner import, the pod's init container, failed); the
	// message is its error, which names the disk and the cause.
	ReasonImportFailed = "ImportFailed"
	// ReasonNodeAgentFailed: vmop's node agent (vm-node) refused, failed or
	// did not answer the pod's runner or import; the message says which.
	ReasonNodeAgentFailed = "NodeAgentFailed"
	ReasonUnschedulable   = "Unschedulable"
	// ReasonImageRepositoryMissing: the pod of a VM with a CD drive mounts
	// the namespace's claim vmop-image-repository, which does not exist.
	ReasonImageRepositoryMissing = "ImageRepositoryMissing"
	// ReasonNoDefaultStorageClass: a claim of the pod names no
	// StorageClass (the runner's data always) and the cluster has no
	// default one to give it.
	ReasonNoDefaultStorageClass = "NoDefaultStorageClass"
	// ReasonClaimPending: a claim of the pod that binds before scheduling
	// finds no volume; the message names it and its class.
	ReasonClaimPending = "ClaimPending"
	// ReasonNodeAgentMissing: no node offers the pod the device resource
	// of vmop's node agent (vm-node), which every VM pod without a tap
	// NIC requests: the agent is not installed, or not ready.
	ReasonNodeAgentMissing = "NodeAgentMissing"
	// ReasonServiceAccountMissing: the pod names a ServiceAccount that
	// does not exist (kubectl vm render --service-account in GitOps mode).
	ReasonServiceAccountMissing = "ServiceAccountMissing"
	ReasonImagePull             = "ImagePullFailed"
	ReasonContainerCreate       = "ContainerCreateFailed"
	ReasonNoFailure             = "NoFailure"
	ReasonWarnings              = "Warnings"
	ReasonNoWarnings            = "NoWarnings"
)
