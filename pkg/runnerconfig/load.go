package runnerconfig

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
)

// Defaults of the runner, for configs that leave fields out (configs
// written by hand for stand-alone use; pkg/render writes every field).
const (
	DefaultPowerdownTimeout = 900
	DefaultMaximumRAM       = 1 << 30
	DefaultFirmware         = "uefi"
	DefaultSpicePort        = 5900
	DefaultUsbRedirects     = 2
	DefaultNetDevice        = "virtio-net"
	DefaultBridge           = "br0"
	// DefaultPodNet is a pod network's guest side: slirp's, so that a guest
	// set up for a user network works unchanged.
	DefaultPodNet = "10.0.2.0/24"
	// DefaultPodMAC: the runner's DHCP server answers only the guest's
	// NIC, so it must know its address.
	DefaultPodMAC = "52:54:00:70:6f:64"
)

// Firmwares are the firmware kinds the runner knows.
var Firmwares = []string{"bios", "uefi", "uefi-4m", "secure", "secure-4m"}

// Load reads, defaults and validates a config file. The error names the
// file and, for invalid values, every field at fault. A file larger than
// manifest.MaxDocumentSize is refused after reading that much.
func Load(path string) (*Config, error) {
	c, _, err := LoadFile(path)
	return c, err
}

// LoadFile is Load that also returns the file's bytes, for a caller that
// compares later versions of the file with what it loaded.
func LoadFile(path string) (*Config, []byte, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	c, err := Parse(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, data, nil
}

// ReadFile reads a config file of at most manifest.MaxDocumentSize bytes.
func ReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := manifest.ReadAll(f, manifest.MaxDocumentSize)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// Parse decodes, defaults and validates a config.
func Parse(data []byte) (*Config, error) {
	f, err := Decode(data)
	if err != nil {
		return nil, err
	}
	c := &f.Runner
	if err := c.Complete(); err != nil {
		return nil, err
	}
	return c, nil
}

// Complete defaults and validates c, as Parse does a decoded config.
func (c *Config) Complete() error {
	c.Default()
	if errs := c.Validate(); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

// Decode only decodes a config file, for a tool that edits it and writes
// it back without the defaults.
func Decode(data []byte) (*File, error) {
	js, err := manifest.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var f File
	dec := json.NewDecoder(bytes.NewReader(js))
	if err := dec.Decode(&f); err != nil {
		return nil, err
	}
	return &f, nil
}

// Size is a number of bytes, written as a number or as a string: a
// Kubernetes quantity ("4Gi", "1G") or the "4 GiB" form of VM-Operator's
// runner. A value that does not parse is kept for Validate, which names
// its field.
type Size struct {
	Bytes   int64
	invalid string
}

// MarshalJSON writes the number of bytes.
func (s Size) MarshalJSON() ([]byte, error) {
	return json.Marshal(s.Bytes)
}

// UnmarshalJSON accepts a number or a string.
func (s *Size) UnmarshalJSON(b []byte) error {
	*s = Size{}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		str = string(b) // a number, or something Validate reports
	}
	n, err := ParseSize(str)
	if err != nil {
		s.invalid = str
		return nil //nolint:nilerr // Validate reports it, with the field's path
	}
	s.Bytes = n
	return nil
}

// ParseSize parses "4Gi", "1G", "4 GiB", "512 MB" or a number of bytes.
func ParseSize(s string) (int64, error) {
	t := strings.ReplaceAll(strings.TrimSpace(s), " ", "")
	if strings.HasSuffix(t, "iB") || (strings.HasSuffix(t, "B") && len(t) > 1 && t[len(t)-2] > '9') {
		t = strings.TrimSuffix(t, "B")
	}
	if strings.HasSuffix(t, "K") { // "4 KiB" gives "4Ki"; "4 KB" gives "4K", which means kilo
		t = strings.TrimSuffix(t, "K") + "k"
	}
	q, err := resource.ParseQuantity(t)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size such as 4Gi or 4 GiB", s)
	}
	return q.Value(), nil
}

// Default fills in what a hand-written config may leave out.
func (c *Config) Default() {
	v := &c.VM
	if v.Firmware == "" {
		v.Firmware = DefaultFirmware
	}
	if v.PowerdownTimeout == nil {
		t := int64(DefaultPowerdownTimeout)
		v.PowerdownTimeout = &t
	}
	if v.MaximumCPUs == 0 {
		v.MaximumCPUs = max(1, v.topology())
	}
	if v.CurrentCPUs == 0 {
		v.CurrentCPUs = v.MaximumCPUs
	}
	// As VM-Operator's runner does: a current count above the maximum
	// raises the maximum.
	v.MaximumCPUs = max(v.MaximumCPUs, v.CurrentCPUs)
	if v.MaximumRAM == (Size{}) {
		v.MaximumRAM = Size{Bytes: DefaultMaximumRAM}
	}
	if v.CurrentRAM == (Size{}) {
		v.CurrentRAM = v.MaximumRAM
	}
	// qemu sizes a machine's RAM in whole MiB ("256M" is 244.1 MiB).
	v.MaximumRAM.Bytes = RoundUpMiB(v.MaximumRAM.Bytes)
	if v.RTCBase == "" {
		v.RTCBase = "utc"
	}
	if v.RTCClock == "" {
		v.RTCClock = "rt"
	}
	for i := range v.Network {
		n := &v.Network[i]
		if n.Device == "" {
			n.Device = DefaultNetDevice
		}
		switch {
		case n.Type == NetworkTap && n.Bridge == "":
			n.Bridge = DefaultBridge
		case n.Type == NetworkPod:
			n.Net = cmp.Or(n.Net, DefaultPodNet)
			n.MAC = cmp.Or(n.MAC, DefaultPodMAC)
			for j := range n.Ports {
				n.Ports[j].Protocol = cmp.Or(n.Ports[j].Protocol, "TCP")
			}
		}
	}
	if v.Display != nil {
		if v.Display.Outputs == 0 {
			v.Display.Outputs = 1
		}
		if sp := v.Display.Spice; sp != nil && sp.Port == 0 {
			sp.Port = DefaultSpicePort
		}
	}
}

// RoundUpMiB is bytes rounded up to a whole MiB, as the runner gives a VM
// its maximum RAM.
func RoundUpMiB(bytes int64) int64 {
	const mib = 1 << 20
	if bytes <= 0 || bytes > math.MaxInt64-mib {
		return bytes // validation reports it
	}
	return (bytes + mib - 1) / mib * mib
}

func (v *VM) topology() int32 {
	n := int64(1)
	for _, f := range []int32{v.Sockets, v.DiesPerSocket, v.CoresPerDie, v.ThreadsPerCore} {
		if f > 0 {
			n *= int64(f)
		}
	}
	return int32(min(n, 1<<16))
}

// Validate returns every problem of a defaulted config.
func (c *Config) Validate() field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("/Runner", "vm")
	v := &c.VM
	if v.Name == "" {
		errs = append(errs, field.Required(p.Child("name"), ""))
	}
	if !slices.Contains(Firmwares, v.Firmware) {
		errs = append(errs, field.NotSupported(p.Child("firmware"), v.Firmware, Firmwares))
	}
	if *v.PowerdownTimeout < 0 {
		errs = append(errs, field.Invalid(p.Child("powerdownTimeout"), *v.PowerdownTimeout, "must be 0 or more seconds"))
	}
	// The limits of a VM are the API's, one definition for both.
	if v.MaximumCPUs < 1 || v.MaximumCPUs > v1.MaxCPUs {
		errs = append(errs, field.Invalid(p.Child("maximumCpus"), v.MaximumCPUs, fmt.Sprintf("must be between 1 and %d", v1.MaxCPUs)))
	}
	if v.CurrentCPUs < 1 {
		errs = append(errs, field.Invalid(p.Child("currentCpus"), v.CurrentCPUs, "must be at least 1"))
	}
	switch {
	case v.MaximumRAM.invalid != "":
		errs = append(errs, field.Invalid(p.Child("maximumRam"), v.MaximumRAM.invalid, "must be a size such as 4Gi or 4 GiB"))
	case v.MaximumRAM.Bytes < 1<<20:
		errs = append(errs, field.Invalid(p.Child("maximumRam"), v.MaximumRAM.Bytes, "must be at least 1Mi"))
	}
	switch {
	case v.CurrentRAM.invalid != "":
		if v.CurrentRAM != v.MaximumRAM { // not the default copied from a bad maximum
			errs = append(errs, field.Invalid(p.Child("currentRam"), v.CurrentRAM.invalid, "must be a size such as 4Gi or 4 GiB"))
		}
	case v.CurrentRAM.Bytes < 1<<20 || (v.MaximumRAM.invalid == "" && v.CurrentRAM.Bytes > v.MaximumRAM.Bytes):
		errs = append(errs, field.Invalid(p.Child("currentRam"), v.CurrentRAM.Bytes, "must be between 1Mi and maximumRam"))
	}
	pods := 0
	for i, n := range v.Network {
		np := p.Child("network").Index(i)
		switch n.Type {
		case NetworkTap, NetworkUser:
		case NetworkPod:
			if pods++; pods > 1 {
				errs = append(errs, field.Duplicate(np.Child("type"), "only one network may be the pod's"))
			}
			errs = append(errs, n.validatePod(np)...)
		default:
			errs = append(errs, field.NotSupported(np.Child("type"), n.Type, []string{NetworkTap, NetworkUser, NetworkPod}))
		}
	}
	cds := 0
	for i, d := range v.Drives {
		dp := p.Child("drives").Index(i)
		switch d.Type {
		case DriveCDROM:
			cds++
		case DriveRaw:
			if d.Resource == "" && d.Device == "" && d.File == "" {
				errs = append(errs, field.Required(dp.Child("resource"), "a raw drive needs a resource, device or file"))
			}
		default:
			errs = append(errs, field.NotSupported(dp.Child("type"), d.Type, []string{DriveCDROM, DriveRaw}))
		}
		if d.Bootindex != nil && *d.Bootindex < 0 {
			errs = append(errs, field.Invalid(dp.Child("bootindex"), *d.Bootindex, "must be 0 or more"))
		}
	}
	if cds > v1.MaxCDROMs {
		errs = append(errs, field.TooMany(p.Child("drives"), cds, v1.MaxCDROMs))
	}
	if d := v.Display; d != nil {
		if d.Outputs < 1 || d.Outputs > 16 {
			errs = append(errs, field.Invalid(p.Child("display", "outputs"), d.Outputs, "must be between 1 and 16"))
		}
		if sp := d.Spice; sp != nil && (sp.Port < 1 || sp.Port > 65535) {
			errs = append(errs, field.Invalid(p.Child("display", "spice", "port"), sp.Port, "must be between 1 and 65535"))
		}
	}
	return errs
}

// validatePod checks what the runner needs of a pod network: a guest
// network with room for the pod's and the guest's addresses, a MAC for its
// DHCP server, and valid ports.
func (n *Network) validatePod(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if pfx, err := netip.ParsePrefix(n.Net); err != nil || !pfx.Addr().Is4() || pfx.Bits() < 4 || pfx.Bits() > 27 {
		errs = append(errs, field.Invalid(p.Child("net"), n.Net, "must be an IPv4 network in CIDR notation with a prefix of 4 to 27 bits, e.g. 10.0.2.0/24"))
	}
	if _, err := net.ParseMAC(n.MAC); err != nil {
		errs = append(errs, field.Invalid(p.Child("mac"), n.MAC, "must be a MAC address such as 52:54:00:12:34:56"))
	}
	for i, port := range n.Ports {
		pp := p.Child("ports").Index(i)
		if port.Port < 1 || port.Port > 65535 {
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, "must be from 1 to 65535"))
		}
		if port.Protocol != "TCP" && port.Protocol != "UDP" {
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []string{"TCP", "UDP"}))
		}
	}
	return errs
}
