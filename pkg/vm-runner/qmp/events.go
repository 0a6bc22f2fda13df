package qmp

// Names of the events the runner reacts to.
const (
	// EventPowerdown: the ACPI power button was pressed (system_powerdown).
	EventPowerdown = "POWERDOWN"
	// EventShutdown: the guest or a host command shut qemu down; see ShutdownData.
	EventShutdown = "SHUTDOWN"
	// EventReset: the machine was reset; Data like SHUTDOWN's.
	EventReset = "RESET"
	// EventStop: the VM was paused.
	EventStop = "STOP"
	// EventResume: the VM runs (again).
	EventResume = "RESUME"
	// EventDeviceTrayMoved: a tray opened or closed; see TrayMovedData.
	EventDeviceTrayMoved = "DEVICE_TRAY_MOVED"
	// EventDeviceDeleted: an unplug has completed; see DeviceDeletedData.
	EventDeviceDeleted = "DEVICE_DELETED"
	// EventBalloonChange: the guest's balloon driver reached a new size; see BalloonChangeData.
	EventBalloonChange = "BALLOON_CHANGE"
	// EventSpiceConnected, EventSpiceInitialized, EventSpiceDisconnected:
	// SPICE client connections; see SpiceEventData.
	EventSpiceConnected    = "SPICE_CONNECTED"
	EventSpiceInitialized  = "SPICE_INITIALIZED"
	EventSpiceDisconnected = "SPICE_DISCONNECTED"
	// EventVserportChange: a guest opened or closed a virtio-serial port
	// (e.g. the guest agent's); see VserportChangeData.
	EventVserportChange = "VSERPORT_CHANGE"
	// EventACPIDeviceOST: the guest's ACPI _OST answer to a hot-(un)plug; see ACPIDeviceOSTData.
	EventACPIDeviceOST = "ACPI_DEVICE_OST"
	// EventBlockIOError: a disk's read or write failed; with the drive's
	// werror/rerror=stop, qemu paused the guest (action "stop"). Data:
	// node-name, operation, action, nospace (ENOSPC), reason.
	EventBlockIOError = "BLOCK_IO_ERROR"
	// EventGuestPanicked: the guest's kernel panicked (pvpanic); with
	// -action panic=pause, qemu holds the guest paused.
	EventGuestPanicked = "GUEST_PANICKED"
)

// ShutdownData is the Data of SHUTDOWN and RESET.
type ShutdownData struct {
	// Guest is true when the guest initiated it (e.g. poweroff in the guest).
	Guest bool `json:"guest"`
	// Reason is e.g. "guest-shutdown", "host-qmp-quit", "host-signal".
	Reason string `json:"reason"`
}

// TrayMovedData is the Data of DEVICE_TRAY_MOVED.
type TrayMovedData struct {
	// Device is the -drive id (empty with -blockdev); ID the qdev id.
	Device   string `json:"device"`
	ID       string `json:"id"`
	TrayOpen bool   `json:"tray-open"`
}

// DeviceDeletedData is the Data of DEVICE_DELETED.
type DeviceDeletedData struct {
	// Device is the qdev id, if the device had one.
	Device string `json:"device,omitempty"`
	Path   string `json:"path"`
}

// BalloonChangeData is the Data of BALLOON_CHANGE.
type BalloonChangeData struct {
	// Actual is the guest's RAM in bytes.
	Actual int64 `json:"actual"`
}

// SpiceEventData is the Data of the SPICE_* events.
type SpiceEventData struct {
	Server SpiceEndpoint `json:"server"`
	Client SpiceEndpoint `json:"client"`
}

// SpiceEndpoint is one side of a SPICE connection.
type SpiceEndpoint struct {
	Host   string `json:"host"`
	Port   string `json:"port"`
	Family string `json:"family"`
}

// VserportChangeData is the Data of VSERPORT_CHANGE.
type VserportChangeData struct {
	ID   string `json:"id"`
	Open bool   `json:"open"`
}

// ACPIDeviceOSTData is the Data of ACPI_DEVICE_OST.
type ACPIDeviceOSTData struct {
	Info struct {
		Device   string `json:"device,omitempty"`
		Slot     string `json:"slot"`
		SlotType string `json:"slot-type"`
		Source   int    `json:"source"`
		Status   int    `json:"status"`
	} `json:"info"`
}
