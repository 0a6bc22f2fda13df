package runner

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"text/template"

	"github.com/vmop/vmop/pkg/podnet"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
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

var funcs = template.FuncMap{
	// opt makes a value safe inside a qemu option list.
	"opt":   func(s string) string { return strings.ReplaceAll(s, ",", ",,") },
	"mib":   func(s runnerconfig.Size) int64 { return s.Bytes >> 20 },
	"deref": func(p *int32) int32 { return *p },
	"seq":   func(n int32) []struct{} { return make([]struct{}, max(n, 0)) },
}

// Template is a parsed command template.
type Template struct {
	t      *template.Template
	source string
}

// LoadTemplate reads the template name (the standard one when empty),
// preferring the override directories.
func LoadTemplate(name string, dirs ...string) (*Template, error) {
	text, source, err := templates.Read(name, dirs...)
	if err != nil {
		return nil, err
	}
	t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", source, err)
	}
	return &Template{t: t, source: source}, nil
}

// Args executes the template for a machine and splits its lines into
// qemu's arguments.
func (t *Template) Args(m *Machine) ([]string, error) {
	var out bytes.Buffer
	if err := t.t.Execute(&out, m); err != nil {
		return nil, fmt.Errorf("template %s: %w", t.source, err)
	}
	var args []string
	for line := range strings.Lines(out.String()) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		opt, value, ok := strings.Cut(line, " ")
		args = append(args, opt)
		if ok {
			args = append(args, strings.TrimSpace(value))
		}
	}
	return args, nil
}
