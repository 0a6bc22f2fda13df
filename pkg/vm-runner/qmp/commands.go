package qmp

import (
	"context"
	"fmt"
)

// Typed commands. They are built here rather than with go-qemu's raw package
// because raw follows the qemu 2.11 schema: its device_add cannot carry CPU
// props, its BlockInfo no longer matches, and it has no event types.

// Cont resumes the guest (leaves -S prelaunch or a stop).
func (m *Monitor) Cont(ctx context.Context) error { return m.Execute(ctx, "cont", nil, nil) }

// Stop pauses the guest.
func (m *Monitor) Stop(ctx context.Context) error { return m.Execute(ctx, "stop", nil, nil) }

// SystemPowerdown presses the ACPI power button; qemu emits POWERDOWN.
func (m *Monitor) SystemPowerdown(ctx context.Context) error {
	return m.Execute(ctx, "system_powerdown", nil, nil)
}

// SystemReset resets the machine; qemu emits RESET.
func (m *Monitor) SystemReset(ctx context.Context) error {
	return m.Execute(ctx, "system_reset", nil, nil)
}

// Quit makes qemu exit at once; Done closes shortly after it returns.
func (m *Monitor) Quit(ctx context.Context) error { return m.Execute(ctx, "quit", nil, nil) }

// StatusInfo is the reply of query-status.
type StatusInfo struct {
	Running bool `json:"running"`
	// Status is the run state, e.g. "prelaunch", "running", "paused",
	// "shutdown", "guest-panicked".
	Status string `json:"status"`
}

// QueryStatus returns the VM's run state.
func (m *Monitor) QueryStatus(ctx context.Context) (StatusInfo, error) {
	var s StatusInfo
	err := m.Execute(ctx, "query-status", nil, &s)
	return s, err
}

// KVMInfo is the reply of query-kvm.
type KVMInfo struct {
	Enabled bool `json:"enabled"`
	Present bool `json:"present"`
}

// QueryKVM tells whether qemu runs with KVM (Enabled) and could (Present).
func (m *Monitor) QueryKVM(ctx context.Context) (KVMInfo, error) {
	var k KVMInfo
	err := m.Execute(ctx, "query-kvm", nil, &k)
	return k, err
}

// CPUProps locates a CPU slot. Only the properties the machine uses are set;
// device_add must get exactly those.
type CPUProps struct {
	NodeID    *int `json:"node-id,omitempty"`
	SocketID  *int `json:"socket-id,omitempty"`
	DieID     *int `json:"die-id,omitempty"`
	ClusterID *int `json:"cluster-id,omitempty"`
	CoreID    *int `json:"core-id,omitempty"`
	ThreadID  *int `json:"thread-id,omitempty"`
}

// HotpluggableCPU is one entry of query-hotpluggable-cpus: a CPU slot.
type HotpluggableCPU struct {
	// Type is the CPU device type, the driver for device_add.
	Type       string   `json:"type"`
	VCPUsCount int      `json:"vcpus-count"`
	Props      CPUProps `json:"props"`
	// QOMPath is set when a CPU occupies the slot.
	QOMPath string `json:"qom-path,omitempty"`
}

// Plugged reports whether a CPU occupies the slot.
func (c HotpluggableCPU) Plugged() bool { return c.QOMPath != "" }

// QueryHotpluggableCPUs lists the CPU slots, plugged or free.
func (m *Monitor) QueryHotpluggableCPUs(ctx context.Context) ([]HotpluggableCPU, error) {
	var cpus []HotpluggableCPU
	err := m.Execute(ctx, "query-hotpluggable-cpus", nil, &cpus)
	return cpus, err
}

// AddCPU plugs a CPU into the free slot cpu (from QueryHotpluggableCPUs) as
// device id. The guest sees it only if it supports CPU hot-plug.
func (m *Monitor) AddCPU(ctx context.Context, cpu HotpluggableCPU, id string) error {
	if cpu.Type == "" {
		return fmt.Errorf("qmp device_add: cpu slot has no type")
	}
	args := struct {
		Driver string `json:"driver"`
		ID     string `json:"id,omitempty"`
		CPUProps
	}{cpu.Type, id, cpu.Props}
	return m.Execute(ctx, "device_add", args, nil)
}

// DeviceDel asks for the removal of device id. It only starts the unplug:
// the device is gone when DEVICE_DELETED arrives, which needs the guest's
// cooperation for CPUs and PCI devices.
func (m *Monitor) DeviceDel(ctx context.Context, id string) error {
	return m.Execute(ctx, "device_del", map[string]any{"id": id}, nil)
}

// Balloon asks the guest's balloon driver to shrink or grow the guest's RAM
// to bytes. Without a balloon device it fails with class DeviceNotActive.
func (m *Monitor) Balloon(ctx context.Context, bytes int64) error {
	return m.Execute(ctx, "balloon", map[string]any{"value": bytes}, nil)
}

// QueryBalloon returns the guest's current RAM in bytes as the balloon driver
// reports it (the full RAM until a guest driver has acted).
func (m *Monitor) QueryBalloon(ctx context.Context) (int64, error) {
	var b struct {
		Actual int64 `json:"actual"`
	}
	err := m.Execute(ctx, "query-balloon", nil, &b)
	return b.Actual, err
}

// BlockdevOpenTray opens the tray of removable drive id (the qdev id, e.g.
// "cd0"). A guest may have locked it: without force qemu then only asks the
// guest, and DEVICE_TRAY_MOVED arrives if and when the guest opens it.
func (m *Monitor) BlockdevOpenTray(ctx context.Context, id string, force bool) error {
	return m.Execute(ctx, "blockdev-open-tray", map[string]any{"id": id, "force": force}, nil)
}

// BlockdevCloseTray closes the tray of drive id.
func (m *Monitor) BlockdevCloseTray(ctx context.Context, id string) error {
	return m.Execute(ctx, "blockdev-close-tray", map[string]any{"id": id}, nil)
}

// BlockdevChangeMedium opens the tray of drive id, inserts filename (format
// e.g. "raw"; empty lets qemu probe) and closes the tray. readOnly opens the
// image read-only, which CD images need when the file is not writable.
func (m *Monitor) BlockdevChangeMedium(ctx context.Context, id, filename, format string, readOnly bool) error {
	args := map[string]any{"id": id, "filename": filename}
	if format != "" {
		args["format"] = format
	}
	if readOnly {
		args["read-only-mode"] = "read-only"
	}
	return m.Execute(ctx, "blockdev-change-medium", args, nil)
}

// BlockdevRemoveMedium removes the medium of drive id; its tray must be open.
func (m *Monitor) BlockdevRemoveMedium(ctx context.Context, id string) error {
	return m.Execute(ctx, "blockdev-remove-medium", map[string]any{"id": id}, nil)
}

// BlockInfo is one entry of query-block.
type BlockInfo struct {
	// Device is the -drive id; empty for -blockdev backends.
	Device string `json:"device"`
	// QDev is the qdev id of the attached device (or its QOM path).
	QDev      string `json:"qdev"`
	Removable bool   `json:"removable"`
	Locked    bool   `json:"locked"`
	// TrayOpen is only reported for devices with a tray.
	TrayOpen *bool `json:"tray_open,omitempty"`
	// Inserted is nil when the drive has no medium.
	Inserted *BlockDeviceInfo `json:"inserted,omitempty"`
	IOStatus string           `json:"io-status,omitempty"`
}

// BlockDeviceInfo describes an inserted medium.
type BlockDeviceInfo struct {
	File     string `json:"file"`
	NodeName string `json:"node-name,omitempty"`
	ReadOnly bool   `json:"ro"`
	Driver   string `json:"drv"`
}

// QueryBlock lists the block devices with their medium and tray state.
func (m *Monitor) QueryBlock(ctx context.Context) ([]BlockInfo, error) {
	var b []BlockInfo
	err := m.Execute(ctx, "query-block", nil, &b)
	return b, err
}

// SetPassword sets the display password of protocol ("spice" or "vnc").
// connected says what happens to connected clients: "keep", "disconnect" or
// "fail"; empty leaves qemu's default. SPICE must run with ticketing on.
func (m *Monitor) SetPassword(ctx context.Context, protocol, password, connected string) error {
	args := map[string]any{"protocol": protocol, "password": password}
	if connected != "" {
		args["connected"] = connected
	}
	return m.Execute(ctx, "set_password", args, nil)
}

// ExpirePassword sets when the display password expires: "now", "never",
// "+SECONDS" from now, or an absolute UNIX time in seconds.
func (m *Monitor) ExpirePassword(ctx context.Context, protocol, time string) error {
	return m.Execute(ctx, "expire_password", map[string]any{"protocol": protocol, "time": time}, nil)
}

// SpiceInfo is the reply of query-spice.
type SpiceInfo struct {
	Enabled  bool   `json:"enabled"`
	Migrated bool   `json:"migrated"`
	Host     string `json:"host,omitempty"`
	Port     int    `json:"port,omitempty"`
	TLSPort  int    `json:"tls-port,omitempty"`
	// Auth is "spice" with ticketing (a password), "none" without.
	Auth            string         `json:"auth,omitempty"`
	CompiledVersion string         `json:"compiled-version,omitempty"`
	MouseMode       string         `json:"mouse-mode"`
	Channels        []SpiceChannel `json:"channels,omitempty"`
}

// SPICE channel types (SpiceChannel.ChannelType): a viewer's session is
// its main channel; the display channel shows the guest's screen.
const (
	SpiceChannelMain    = 1
	SpiceChannelDisplay = 2
)

// SpiceChannel is a connected SPICE channel.
type SpiceChannel struct {
	Host         string `json:"host"`
	Port         string `json:"port"`
	Family       string `json:"family"`
	ConnectionID int64  `json:"connection-id"`
	ChannelType  int    `json:"channel-type"`
	ChannelID    int    `json:"channel-id"`
	TLS          bool   `json:"tls"`
}

// QuerySpice returns the SPICE server state and its connected channels.
func (m *Monitor) QuerySpice(ctx context.Context) (SpiceInfo, error) {
	var s SpiceInfo
	err := m.Execute(ctx, "query-spice", nil, &s)
	return s, err
}
