package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vmop/vmop/pkg/podnet"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
)

// Machine is what the qemu command is made from: the config plus what the
// runner found out about the host and prepared before the start.
type Machine struct {
	VM         *runnerconfig.VM
	Name, UUID string
	Accel      string // "kvm" or "tcg"
	CPUModel   string
	SMP        string
	Firmware   Firmware
	RuntimeDir string

	QMPSocket, GuestAgentSocket, VmopAgentSocket string
	// ConsoleSocket is where the serial port connects: the runner's
	// (package serialconsole).
	ConsoleSocket string
	// TPMSocket is swtpm's control socket; empty without a TPM.
	TPMSocket string
	// CloudInitISO is the NoCloud seed; empty without cloud-init data.
	CloudInitISO string
	// Ticketing locks the SPICE display until a password is set.
	Ticketing    bool
	SpiceAddress string

	Networks []Network
	Disks    []Drive
	CDROMs   []Drive
}

// Network is a NIC with its qemu id; Tap is the tap device of a pod
// network, which the runner makes before qemu starts.
type Network struct {
	runnerconfig.Network
	ID  string
	Tap string
}

// Drive is a disk or CD drive with its qemu id; CD drives are cd0, cd1...
// in config order, the ids that live changes address. A CD drive has no
// Path: qemu starts with it empty and the runner inserts the medium over
// QMP, so that a medium that cannot be opened empties one drive instead of
// stopping qemu.
type Drive struct {
	ID        string
	Path      string
	IsDevice  bool
	Bootindex *int32
	// Index is the drive's index in the config's drives.
	Index int
}

// NewMachine derives the command's data from a config. isDevice tells
// whether a path is a block device (a disk given as "resource").
func NewMachine(vm *runnerconfig.VM, uuid string, kvm bool, fw Firmware, runtimeDir string, isDevice func(string) bool) *Machine {
	m := &Machine{
		VM:               vm,
		Name:             vm.Name,
		UUID:             uuid,
		Accel:            "tcg",
		CPUModel:         vm.CPUModel,
		SMP:              smp(vm),
		Firmware:         fw,
		RuntimeDir:       runtimeDir,
		QMPSocket:        filepath.Join(runtimeDir, "monitor.sock"),
		GuestAgentSocket: filepath.Join(runtimeDir, "guest-agent.sock"),
		VmopAgentSocket:  filepath.Join(runtimeDir, "vmop-agent.sock"),
		ConsoleSocket:    filepath.Join(runtimeDir, serialconsole.GuestSocket),
		SpiceAddress:     "0.0.0.0",
	}
	if kvm {
		m.Accel = "kvm"
	}
	if m.CPUModel == "" || (m.CPUModel == "host" && !kvm) {
		// "host" needs KVM; "max" is the most TCG can emulate. A VM that
		// asks for the host's CPU on a node without KVM gets that.
		m.CPUModel = map[bool]string{true: "host", false: "max"}[kvm]
	}
	for i, n := range vm.Network {
		nic := Network{Network: n, ID: "net" + strconv.Itoa(i)}
		if n.Type == runnerconfig.NetworkPod {
			nic.Tap = podnet.Tap
		}
		m.Networks = append(m.Networks, nic)
	}
	for i, d := range vm.Drives {
		switch d.Type {
		case runnerconfig.DriveCDROM:
			m.CDROMs = append(m.CDROMs, Drive{ID: CDROMID(len(m.CDROMs)), Bootindex: d.Bootindex, Index: i})
		case runnerconfig.DriveRaw:
			path, dev := d.File, false
			switch {
			case d.Device != "":
				path, dev = d.Device, true
			case d.Resource != "":
				path, dev = d.Resource, isDevice(d.Resource)
			}
			m.Disks = append(m.Disks, Drive{ID: "disk" + strconv.Itoa(len(m.Disks)), Path: path, IsDevice: dev, Bootindex: d.Bootindex, Index: i})
		}
	}
	return m
}

// CDROMID is the qemu id of the i-th CD drive of a config.
func CDROMID(i int) string { return "cd" + strconv.Itoa(i) }

// smp is qemu's -smp value: the current count, the maximum, and the parts
// of the topology that are given.
func smp(vm *runnerconfig.VM) string {
	s := fmt.Sprintf("%d,maxcpus=%d", vm.CurrentCPUs, vm.MaximumCPUs)
	for _, p := range []struct {
		name string
		n    int32
	}{{"sockets", vm.Sockets}, {"dies", vm.DiesPerSocket}, {"cores", vm.CoresPerDie}, {"threads", vm.ThreadsPerCore}} {
		if p.n > 0 {
			s += fmt.Sprintf(",%s=%d", p.name, p.n)
		}
	}
	return s
}

// TemplateRequest is what the runner sends vm-runner-template (package
// expand) on its stdin: the template to execute for Machine.
type TemplateRequest struct {
	Template string   `json:"template"`
	Dirs     []string `json:"dirs"`
	Machine  *Machine `json:"machine"`
}

// TemplateHelper is the program that executes the command templates.
const TemplateHelper = "vm-runner-template"

// ExpandTemplate has helper (vm-runner-template; empty: the one beside
// this program, else on PATH) execute the template name (the standard
// one when empty), preferring the override directories, for m, and
// returns qemu's arguments. The helper is a process of its own: package
// expand says why.
func ExpandTemplate(ctx context.Context, helper, name string, dirs []string, m *Machine) ([]string, error) {
	if helper == "" {
		helper = TemplateHelper
		if exe, err := os.Executable(); err == nil {
			if beside := filepath.Join(filepath.Dir(exe), TemplateHelper); exists(beside) {
				helper = beside
			}
		}
	}
	in, err := json.Marshal(TemplateRequest{Template: name, Dirs: dirs, Machine: m})
	if err != nil {
		return nil, fmt.Errorf("the machine for the template: %w", err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, helper)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(in), &out, &errOut
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			return nil, errors.New(msg)
		}
		return nil, fmt.Errorf("%s (the qemu command's template): %w", helper, err)
	}
	var args []string
	if err := json.Unmarshal(out.Bytes(), &args); err != nil {
		return nil, fmt.Errorf("%s: its answer: %w", helper, err)
	}
	return args, nil
}
