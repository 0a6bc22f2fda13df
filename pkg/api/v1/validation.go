package v1

import (
	"cmp"
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// MaxNameLength keeps the pod's controller-revision-hash label
	// ("<vm>-<10 char hash>") within the 63 characters of a label value.
	MaxNameLength = 52
	// MaxCPUs: qemu 7.2's q35 machine takes 288 vCPUs, and x86 guests
	// address 255 without an IOMMU for interrupt remapping. The runner's
	// config (pkg/runnerconfig) has the same limit.
	MaxCPUs = 255
	// MaxPowerdownTimeout bounds the pod's grace period: a day.
	MaxPowerdownTimeout = 86400
	// MaxNetworks and MaxVolumes keep a VM's PCI devices within the slots
	// of q35's root bus; MaxCDROMs is the AHCI controller's six ports
	// (also the runner config's limit).
	MaxNetworks = 8
	MaxVolumes  = 12
	MaxCDROMs   = 6
	// maxBridgeName is Linux's limit for an interface name.
	maxBridgeName = 15
	// MaxOutputs and MaxUsbRedirects bound a display: qemu's virtio-vga
	// takes 16 heads, and each redirect is a USB port.
	MaxOutputs      = 16
	MaxUsbRedirects = 16
)

// NICModels are the network devices a VM may name: those of qemu (7.2 and
// later) that plug into q35's PCI bus or its USB controller.
var NICModels = []string{
	"virtio-net", "virtio-net-pci", "virtio-net-pci-transitional", "virtio-net-pci-non-transitional",
	"e1000", "e1000-82540em", "e1000-82544gc", "e1000-82545em", "e1000e",
	"i82550", "i82551", "i82557a", "i82557b", "i82557c", "i82558a", "i82558b",
	"i82559a", "i82559b", "i82559c", "i82559er", "i82562", "i82801",
	"ne2k_pci", "pcnet", "rtl8139", "tulip", "vmxnet3", "usb-net",
}

// RTCClocks are qemu's -rtc clock values.
var RTCClocks = []string{"host", "rt", "vm"}

// StreamingVideos are SPICE's streaming-video values.
var StreamingVideos = []string{"off", "all", "filter"}

// qemuWord is what may be spliced into a qemu option without escaping:
// a comma would start a new option. A loop, not a regexp: it runs for
// every VM of a render.
var qemuWord = wordMatcher{}

type wordMatcher struct{}

// MatchString tells whether s is letters, digits and _ . : + - only.
func (wordMatcher) MatchString(s string) bool {
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '_' || c == '.' || c == ':' || c == '+' || c == '-':
		default:
			return false
		}
	}
	return s != ""
}

// Patterns shared with the CRD, whose schema has the same ones.
var (
	// unicastMAC is the form qemu takes, of an address a NIC may have: the
	// first octet's lowest bit clear (a multicast address is refused by
	// guests).
	unicastMAC = regexp.MustCompile(`^[0-9A-Fa-f][02468aceACE](:[0-9A-Fa-f]{2}){5}$`)
	// canonicalUUID is what qemu's -uuid parses.
	canonicalUUID = regexp.MustCompile(`^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$`)
	// rtcBase is qemu's -rtc base: utc, localtime or a start date.
	rtcBase = regexp.MustCompile(`^(utc|localtime|[0-9]{4}-[0-9]{2}-[0-9]{2}(T[0-9]{2}:[0-9]{2}:[0-9]{2})?)$`)
)

// Validate returns every problem of a defaulted VirtualMachine at once,
// each with its field path. Call Default first: validation checks the
// relations between fields (currentCpus <= maximumCpus) on final values.
func (vm *VirtualMachine) Validate() field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("metadata")
	switch vm.Name {
	case "":
		errs = append(errs, field.Required(meta.Child("name"), ""))
	default:
		for _, msg := range dnsLabelErrors(vm.Name) {
			errs = append(errs, field.Invalid(meta.Child("name"), vm.Name, msg))
		}
		if len(vm.Name) > MaxNameLength {
			errs = append(errs, field.TooLong(meta.Child("name"), vm.Name, MaxNameLength))
		}
	}
	if vm.Namespace != "" {
		for _, msg := range dnsLabelErrors(vm.Namespace) {
			errs = append(errs, field.Invalid(meta.Child("namespace"), vm.Namespace, msg))
		}
	}
	errs = append(errs, validateLabels(vm.Labels, meta.Child("labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(vm.Annotations, meta.Child("annotations"))...)
	spec := field.NewPath("spec")
	errs = append(errs, vm.Spec.Image.validate(spec.Child("image"))...)
	errs = append(errs, vm.Spec.CloudInit.validate(spec.Child("cloudInit"))...)
	if t := vm.Spec.RunnerTemplate; t != nil {
		if _, err := TemplateName(t.Source); err != nil {
			errs = append(errs, field.Invalid(spec.Child("runnerTemplate", "source"), t.Source,
				"must be a file name in the runner's template directories, without a directory (or VM-Operator's Standard-VM template)"))
		}
	}
	if lb := vm.Spec.LoadBalancerService; lb != nil {
		p := spec.Child("loadBalancerService")
		for k, v := range lb.Labels {
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(p.Child("labels").Key(k), k, msg))
			}
			if v != nil {
				for _, msg := range validation.IsValidLabelValue(*v) {
					errs = append(errs, field.Invalid(p.Child("labels").Key(k), *v, msg))
				}
			}
		}
		for k := range lb.Annotations {
			for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
				errs = append(errs, field.Invalid(p.Child("annotations").Key(k), k, msg))
			}
		}
	}
	errs = append(errs, vm.Spec.validatePodFields(spec)...)
	errs = append(errs, vm.Spec.VM.validate(spec.Child("vm"))...)
	return errs
}

// Warnings lists what is accepted but has no effect in vmop.
func (vm *VirtualMachine) Warnings() []string {
	var w []string
	ignored := func(path string) {
		w = append(w, fmt.Sprintf("spec.%s is only used by VM-Operator's web GUI and ignored", path))
	}
	if len(vm.Spec.Permissions) > 0 {
		ignored("permissions")
	}
	if len(vm.Spec.Pools) > 0 {
		ignored("pools")
	}
	if vm.Spec.LoggingProperties != "" {
		w = append(w, "spec.loggingProperties configures VM-Operator's Java runner and is ignored")
	}
	if vm.Spec.LoadBalancerService != nil && (vm.Spec.VM.Display == nil || vm.Spec.VM.Display.Spice == nil) {
		w = append(w, "spec.loadBalancerService is ignored: the VM has no SPICE display to expose")
	}
	if t := vm.Spec.RunnerTemplate; t != nil && IsVMOperatorStandard(t.Source) {
		w = append(w, fmt.Sprintf("spec.runnerTemplate.source %s is VM-Operator's template: vmop's %s takes its place", t.Source, StandardTemplate))
	}
	if d := vm.Spec.VM.Display; d != nil && d.Spice != nil && d.Spice.Ticket != "" {
		w = append(w, "spec.vm.display.spice.ticket is deprecated and ignored: use a display Secret")
	}
	return w
}

func (im *Image) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if im == nil {
		return nil
	}
	parts := im.Repository != "" || im.Path != "" || im.Version != ""
	switch {
	case im.Source != "" && parts:
		errs = append(errs, field.Invalid(p, im.Source, "give either source or repository/path/version, not both"))
	case im.Source == "" && im.Path == "":
		errs = append(errs, field.Required(p.Child("source"), "or path"))
	}
	switch im.PullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, field.NotSupported(p.Child("pullPolicy"), im.PullPolicy,
			[]corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}))
	}
	return errs
}

func (c *CloudInit) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if c == nil {
		return nil
	}
	if !c.MetaData.IsNull() {
		if _, ok := c.MetaData.Map(); !ok {
			errs = append(errs, field.TypeInvalid(p.Child("metaData"), string(c.MetaData.Raw), "must be an object"))
		}
	}
	if !c.NetworkConfig.IsNull() {
		if _, ok := c.NetworkConfig.Map(); !ok {
			errs = append(errs, field.TypeInvalid(p.Child("networkConfig"), string(c.NetworkConfig.Raw), "must be an object"))
		}
	}
	if !c.UserData.IsNull() {
		if _, ok := c.UserData.Map(); !ok && c.UserData.Raw[0] != '"' {
			errs = append(errs, field.TypeInvalid(p.Child("userData"), string(c.UserData.Raw), "must be an object (cloud-config) or a string"))
		}
	}
	return errs
}

func (v *VMSpec) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch v.State {
	case StateRunning, StateStopped:
	default:
		errs = append(errs, field.NotSupported(p.Child("state"), v.State, []VMState{StateRunning, StateStopped}))
	}
	if !slices.Contains(Firmwares, v.Firmware) {
		errs = append(errs, field.NotSupported(p.Child("firmware"), v.Firmware, Firmwares))
	}
	if v.MachineUUID != "" && !canonicalUUID.MatchString(v.MachineUUID) {
		errs = append(errs, field.Invalid(p.Child("machineUuid"), v.MachineUUID, "must be a UUID in its 8-4-4-4-12 hex digit form"))
	}
	if t := v.PowerdownTimeout; t != nil && (*t < 0 || *t > MaxPowerdownTimeout) {
		errs = append(errs, field.Invalid(p.Child("powerdownTimeout"), *t, fmt.Sprintf("must be between 0 and %d seconds", MaxPowerdownTimeout)))
	}
	if v.CPUModel != "" && !qemuWord.MatchString(v.CPUModel) {
		errs = append(errs, field.Invalid(p.Child("cpuModel"), v.CPUModel, "must be a qemu CPU model name (letters, digits, _ . : + -)"))
	}
	errs = append(errs, v.validateCPUs(p)...)
	errs = append(errs, v.validateRAM(p)...)
	if !rtcBase.MatchString(v.RTCBase) {
		errs = append(errs, field.Invalid(p.Child("rtcBase"), v.RTCBase, "must be utc, localtime or a date such as 2006-06-17 or 2006-06-17T16:01:21"))
	}
	if !slices.Contains(RTCClocks, v.RTCClock) {
		errs = append(errs, field.NotSupported(p.Child("rtcClock"), v.RTCClock, RTCClocks))
	}
	errs = append(errs, v.validateNetworks(p.Child("networks"))...)
	errs = append(errs, v.validateDisks(p.Child("disks"))...)
	errs = append(errs, v.Display.validate(p.Child("display"))...)
	return errs
}

func (v *VMSpec) validateCPUs(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	maxCPUs, cur := *v.MaximumCPUs, *v.CurrentCPUs
	maxOK := maxCPUs >= 1 && maxCPUs <= MaxCPUs
	if !maxOK {
		errs = append(errs, field.Invalid(p.Child("maximumCpus"), maxCPUs, fmt.Sprintf("must be between 1 and %d", MaxCPUs)))
	}
	switch {
	case !maxOK && cur == maxCPUs:
		// currentCpus took the bad default; one error is enough.
	case cur < 1:
		errs = append(errs, field.Invalid(p.Child("currentCpus"), cur, "must be at least 1"))
	case cur > maxCPUs:
		errs = append(errs, field.Invalid(p.Child("currentCpus"), cur, fmt.Sprintf("must not exceed maximumCpus (%d)", maxCPUs)))
	}
	if t := v.CPUTopology; t != nil {
		tp := p.Child("cpuTopology")
		for _, f := range []struct {
			name  string
			value int32
		}{{"sockets", t.Sockets}, {"diesPerSocket", t.DiesPerSocket}, {"coresPerDie", t.CoresPerDie}, {"threadsPerCore", t.ThreadsPerCore}} {
			if f.value < 0 || f.value > MaxCPUs {
				errs = append(errs, field.Invalid(tp.Child(f.name), f.value, fmt.Sprintf("must be between 0 (omitted) and %d", MaxCPUs)))
			}
		}
		if len(errs) == 0 {
			// qemu derives the parts left out; the given ones must fit.
			full := t.Sockets > 0 && t.CoresPerDie > 0 && t.ThreadsPerCore > 0
			if n := t.product(); (full && n != int64(maxCPUs)) || (!full && int64(maxCPUs)%n != 0) {
				errs = append(errs, field.Invalid(tp, n, fmt.Sprintf("the topology's %d CPUs do not fit maximumCpus (%d)", n, maxCPUs)))
			}
		}
	}
	return errs
}

func (v *VMSpec) validateRAM(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	size := func(name string, q Quantity) int64 {
		parsed, err := q.Parse()
		if err != nil {
			errs = append(errs, field.Invalid(p.Child(name), string(q), "must be a quantity such as 4Gi or 512Mi"))
			return -1
		}
		n := parsed.Value()
		if n < 1<<20 {
			errs = append(errs, field.Invalid(p.Child(name), string(q), "must be at least 1Mi"))
			return -1
		}
		return n
	}
	maxRAM := size("maximumRam", v.MaximumRAM)
	if maxRAM < 0 && v.CurrentRAM == v.MaximumRAM {
		return errs // currentRam took the bad default; one error is enough
	}
	cur := size("currentRam", v.CurrentRAM)
	if maxRAM > 0 && cur > maxRAM {
		errs = append(errs, field.Invalid(p.Child("currentRam"), string(v.CurrentRAM), fmt.Sprintf("must not exceed maximumRam (%s)", v.MaximumRAM)))
	}
	return errs
}

func (v *VMSpec) validateNetworks(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(v.Networks) > MaxNetworks {
		errs = append(errs, field.TooMany(p, len(v.Networks), MaxNetworks))
	}
	macs := map[string]int{}
	pod, tap := -1, -1
	for i := range v.Networks {
		np := p.Index(i)
		errs = append(errs, v.Networks[i].validate(np)...)
		switch n := &v.Networks[i]; {
		case n.Pod != nil && pod >= 0:
			errs = append(errs, field.Duplicate(np.Child("pod"), fmt.Sprintf("only one network may be the pod's (also networks[%d])", pod)))
		case n.Pod != nil:
			pod = i
			errs = append(errs, v.validatePodPorts(np.Child("pod", "ports"), n.Pod.Ports)...)
		case n.Tap != nil && tap < 0:
			tap = i
		}
		mac := strings.ToLower(v.Networks[i].mac())
		if mac == "" {
			continue
		}
		if prev, dup := macs[mac]; dup {
			errs = append(errs, field.Duplicate(np, fmt.Sprintf("mac %s (also networks[%d])", mac, prev)))
		}
		macs[mac] = i
	}
	if pod >= 0 && tap >= 0 {
		// A tap network runs the pod on the node's network: NAT there
		// would change the node's.
		errs = append(errs, field.Invalid(p.Index(pod).Child("pod"), "pod", fmt.Sprintf("cannot be combined with a tap network (networks[%d]), which puts the pod on the node's network", tap)))
	}
	return errs
}

// validatePodPorts checks the ports a pod network passes to the guest:
// valid, unique, and none that the pod itself serves.
func (v *VMSpec) validatePodPorts(p *field.Path, ports []PodPort) field.ErrorList {
	var errs field.ErrorList
	seen := map[PodPort]bool{}
	for i, port := range ports {
		pp := p.Index(i)
		proto := cmp.Or(port.Protocol, corev1.ProtocolTCP)
		switch {
		case port.Port < 1 || port.Port > 65535:
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, "must be from 1 to 65535"))
		case proto != corev1.ProtocolTCP && proto != corev1.ProtocolUDP:
			errs = append(errs, field.NotSupported(pp.Child("protocol"), port.Protocol, []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}))
		case seen[PodPort{port.Port, proto}]:
			errs = append(errs, field.Duplicate(pp, fmt.Sprintf("%d/%s", port.Port, proto)))
		case proto == corev1.ProtocolTCP && port.Port == v.spicePort():
			errs = append(errs, field.Invalid(pp.Child("port"), port.Port, "is the pod's own SPICE port (spec.vm.display.spice.port)"))
		}
		seen[PodPort{port.Port, proto}] = true
	}
	return errs
}

// kinds names the kinds a network sets, for an error.
func (n *Network) kinds() string {
	var k []string
	for _, set := range []struct {
		name string
		ok   bool
	}{{"tap", n.Tap != nil}, {"user", n.User != nil}, {"pod", n.Pod != nil}} {
		if set.ok {
			k = append(k, set.name)
		}
	}
	return strings.Join(k, ", ")
}

// spicePort is the port the pod's SPICE server listens on, 0 without one.
func (v *VMSpec) spicePort() int32 {
	if v.Display == nil || v.Display.Spice == nil {
		return 0
	}
	if p := v.Display.Spice.Port; p != nil {
		return *p
	}
	return DefaultSpicePort
}

func (n *Network) mac() string {
	switch {
	case n.Tap != nil:
		return n.Tap.MAC
	case n.User != nil:
		return n.User.MAC
	case n.Pod != nil:
		return n.Pod.MAC
	}
	return ""
}

func (n *Network) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	var device, mac string
	switch {
	case strings.Contains(n.kinds(), ","):
		return append(errs, field.Invalid(p, n.kinds(), "must have exactly one of tap, user or pod"))
	case n.Tap != nil:
		p = p.Child("tap")
		device, mac = n.Tap.Device, n.Tap.MAC
		if b := n.Tap.Bridge; len(b) > maxBridgeName || !qemuWord.MatchString(b) || strings.Contains(b, ":") || b == "." || b == ".." {
			errs = append(errs, field.Invalid(p.Child("bridge"), b, fmt.Sprintf("must be a network interface name (at most %d letters, digits, _ . + -)", maxBridgeName)))
		}
	case n.User != nil:
		p = p.Child("user")
		device, mac = n.User.Device, n.User.MAC
		if n.User.Net != "" && !userNet(n.User.Net) {
			errs = append(errs, field.Invalid(p.Child("net"), n.User.Net, "must be an IPv4 network in CIDR notation with a prefix of 4 to 27 bits, e.g. 10.0.2.0/24"))
		}
	case n.Pod != nil:
		p = p.Child("pod")
		device, mac = n.Pod.Device, n.Pod.MAC
		if n.Pod.Net != "" && !userNet(n.Pod.Net) {
			errs = append(errs, field.Invalid(p.Child("net"), n.Pod.Net, "must be an IPv4 network in CIDR notation with a prefix of 4 to 27 bits, e.g. 10.0.2.0/24"))
		}
	default:
		return append(errs, field.Required(p, "one of tap, user or pod"))
	}
	if !slices.Contains(NICModels, device) {
		errs = append(errs, field.NotSupported(p.Child("device"), device, NICModels))
	}
	if mac != "" && !unicastMAC.MatchString(mac) {
		errs = append(errs, field.Invalid(p.Child("mac"), mac, "must be a unicast MAC address such as 52:54:00:12:34:56"))
	}
	return errs
}

// userNet tells whether qemu's user network can be s: IPv4, a prefix that
// qemu takes (4 or more bits) and room for its DHCP range, which starts at
// the 16th address.
func userNet(s string) bool {
	prefix, err := netip.ParsePrefix(s)
	return err == nil && prefix.Addr().Is4() && prefix.Bits() >= 4 && prefix.Bits() <= 27
}

func (v *VMSpec) validateDisks(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	names := sets.New[string]()
	bootindexes := map[int32]int{}
	volumes, cds := 0, 0
	for i := range v.Disks {
		d := &v.Disks[i]
		dp := p.Index(i)
		if d.Bootindex != nil {
			switch prev, dup := bootindexes[*d.Bootindex]; {
			case *d.Bootindex < 0:
				errs = append(errs, field.Invalid(dp.Child("bootindex"), *d.Bootindex, "must be 0 or more"))
			case dup:
				errs = append(errs, field.Duplicate(dp.Child("bootindex"), fmt.Sprintf("%d (also disks[%d])", *d.Bootindex, prev)))
			default:
				bootindexes[*d.Bootindex] = i
			}
		}
		switch {
		case d.VolumeClaimTemplate != nil && d.CDROM != nil:
			errs = append(errs, field.Invalid(dp, "volumeClaimTemplate, cdrom", "must have exactly one of volumeClaimTemplate or cdrom"))
		case d.VolumeClaimTemplate != nil:
			volumes++
			errs = append(errs, v.validateVolumeClaimTemplate(i, dp.Child("volumeClaimTemplate"), names)...)
		case d.CDROM != nil:
			cds++
			if img := d.CDROM.Image; strings.ContainsAny(img, "\n\x00") {
				errs = append(errs, field.Invalid(dp.Child("cdrom", "image"), img, "must be a path or URL on one line"))
			}
		default:
			errs = append(errs, field.Required(dp, "one of volumeClaimTemplate or cdrom"))
		}
		if d.Source != nil {
			sp := dp.Child("source")
			if d.VolumeClaimTemplate == nil {
				errs = append(errs, field.Forbidden(sp, "only a volumeClaimTemplate disk has a source"))
			}
			errs = append(errs, d.Source.validate(sp)...)
		}
	}
	if volumes > MaxVolumes {
		errs = append(errs, field.Invalid(p, fmt.Sprintf("%d volumeClaimTemplate disks", volumes), fmt.Sprintf("must have at most %d", MaxVolumes)))
	}
	if cds > MaxCDROMs {
		errs = append(errs, field.Invalid(p, fmt.Sprintf("%d cdrom disks", cds), fmt.Sprintf("must have at most %d", MaxCDROMs)))
	}
	return errs
}

func (v *VMSpec) validateVolumeClaimTemplate(i int, p *field.Path, names sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	t := v.Disks[i].VolumeClaimTemplate
	mp := p.Child("metadata")
	name := v.DiskName(i)
	for _, msg := range dnsLabelErrors(name) {
		errs = append(errs, field.Invalid(mp.Child("name"), t.Metadata.Name, fmt.Sprintf("the volume name %q: %s", name, msg)))
	}
	if names.Has(name) {
		errs = append(errs, field.Duplicate(mp.Child("name"), t.Metadata.Name))
	}
	names.Insert(name)
	errs = append(errs, validateLabels(t.Metadata.Labels, mp.Child("labels"))...)
	errs = append(errs, apivalidation.ValidateAnnotations(t.Metadata.Annotations, mp.Child("annotations"))...)
	sp := p.Child("spec")
	if m := *t.Spec.VolumeMode; m != corev1.PersistentVolumeBlock && m != corev1.PersistentVolumeFilesystem {
		errs = append(errs, field.NotSupported(sp.Child("volumeMode"), m, []corev1.PersistentVolumeMode{corev1.PersistentVolumeBlock, corev1.PersistentVolumeFilesystem}))
	}
	storage, ok := t.Spec.Resources.Requests[corev1.ResourceStorage]
	switch sp := sp.Child("resources", "requests").Key(string(corev1.ResourceStorage)); {
	case !ok:
		errs = append(errs, field.Required(sp, "the disk's size, e.g. 20Gi"))
	case storage.Sign() <= 0:
		errs = append(errs, field.Invalid(sp, storage.String(), "must be more than 0"))
	}
	errs = append(errs, validateResourceList(t.Spec.Resources.Limits, sp.Child("resources", "limits"))...)
	for j, m := range t.Spec.AccessModes {
		switch m {
		case corev1.ReadWriteOnce, corev1.ReadWriteMany, corev1.ReadOnlyMany, corev1.ReadWriteOncePod:
		default:
			errs = append(errs, field.NotSupported(sp.Child("accessModes").Index(j), m,
				[]corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce, corev1.ReadWriteMany, corev1.ReadOnlyMany, corev1.ReadWriteOncePod}))
		}
	}
	if sel := t.Spec.Selector; sel != nil && (len(sel.MatchExpressions) > 0 || !labelsOK(sel.MatchLabels)) {
		errs = append(errs, metav1validation.ValidateLabelSelector(t.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, sp.Child("selector"))...)
	}
	return errs
}

func (d *Display) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if o := *d.Outputs; o < 1 || o > MaxOutputs {
		errs = append(errs, field.Invalid(p.Child("outputs"), o, fmt.Sprintf("must be between 1 and %d", MaxOutputs)))
	}
	sp := d.Spice
	if sp == nil {
		return errs
	}
	p = p.Child("spice")
	if port := *sp.Port; port < 1 || port > 65535 {
		errs = append(errs, field.Invalid(p.Child("port"), port, "must be between 1 and 65535"))
	}
	if n := *sp.UsbRedirects; n < 0 || n > MaxUsbRedirects {
		errs = append(errs, field.Invalid(p.Child("usbRedirects"), n, fmt.Sprintf("must be between 0 and %d", MaxUsbRedirects)))
	}
	if sv := sp.StreamingVideo; sv != "" && !slices.Contains(StreamingVideos, sv) {
		errs = append(errs, field.NotSupported(p.Child("streamingVideo"), sv, StreamingVideos))
	}
	return errs
}

// dnsLabelErrors is validation.IsDNS1123Label, with a quick check first:
// its regexp costs more than the rest of a VM's validation.
func dnsLabelErrors(s string) []string {
	ok := len(s) > 0 && len(s) <= validation.DNS1123LabelMaxLength
	for i := 0; ok && i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		ok = alnum || (c == '-' && i > 0 && i < len(s)-1)
	}
	if ok {
		return nil
	}
	return validation.IsDNS1123Label(s)
}

// validateLabels is metav1validation.ValidateLabels with labelsOK first.
func validateLabels(labels map[string]string, p *field.Path) field.ErrorList {
	if labelsOK(labels) {
		return nil
	}
	return metav1validation.ValidateLabels(labels, p)
}

// labelsOK is a quick check that every key is a qualified name and every
// value a label value; apimachinery's regexps cost more than the rest of
// a VM's validation, so they only run to explain a failure.
func labelsOK(labels map[string]string) bool {
	for k, v := range labels {
		prefix, name, found := strings.Cut(k, "/")
		if !found {
			prefix, name = "", k
		}
		if (found && (len(prefix) > validation.DNS1123SubdomainMaxLength || !dnsSubdomain(prefix))) ||
			len(name) > validation.LabelValueMaxLength || name == "" || !nameChars(name, false) ||
			len(v) > validation.LabelValueMaxLength || (v != "" && !nameChars(v, false)) {
			return false
		}
	}
	return true
}

// dnsSubdomain: dot-separated DNS labels.
func dnsSubdomain(s string) bool {
	for label := range strings.SplitSeq(s, ".") {
		if !nameChars(label, true) {
			return false
		}
	}
	return true
}

// nameChars: alphanumeric at both ends, and in between also '-', '.' and,
// unless dns (a DNS subdomain: lower case only), '_' and upper case.
func nameChars(s string, dns bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (!dns && c >= 'A' && c <= 'Z')
		inner := c == '-' || c == '.' || (!dns && c == '_')
		if !alnum && (!inner || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// The forms of a disk source's fields, as the CRD has them: a URL with a
// host, a relative path none of whose segments is "..", and a checksum.
var (
	sourceURLPattern  = regexp.MustCompile(`^https?://[^/\s]+[^\s]*$`)
	sourceFilePattern = regexp.MustCompile(`^(?:` + pathSegment + `/)*` + pathSegment + `$`)
	checksumPattern   = regexp.MustCompile(`^(?:sha256:[0-9a-fA-F]{64}|sha512:[0-9a-fA-F]{128})$`)
	// imageRefPattern is a container image reference: a registry host
	// and port or a first path component, more components, a tag, a
	// digest.
	imageRefPattern = regexp.MustCompile(`^` + imageRef + `$`)
)

const imageRef = `[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?`

// pathSegment is a path segment other than "..".
const pathSegment = `(?:[^./\n\x00][^/\n\x00]*|\.(?:[^./\n\x00][^/\n\x00]*)?|\.\.[^/\n\x00]+)`

// maxSourceLength bounds a source's URL or path.
const maxSourceLength = 4096

func (s *DiskSource) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	given := 0
	for _, v := range []string{s.URL, s.File, s.ContainerDisk} {
		if v != "" {
			given++
		}
	}
	switch {
	case given > 1:
		errs = append(errs, field.Invalid(p, "url, file, containerDisk", "must have exactly one of url, file or containerDisk"))
	case s.ContainerDisk != "":
		if len(s.ContainerDisk) > maxSourceLength {
			errs = append(errs, field.TooLong(p.Child("containerDisk"), "", maxSourceLength))
		} else if !imageRefPattern.MatchString(s.ContainerDisk) {
			errs = append(errs, field.Invalid(p.Child("containerDisk"), s.ContainerDisk, "must be a container image reference, e.g. quay.io/containerdisks/debian:13"))
		}
	case s.URL != "":
		if len(s.URL) > maxSourceLength {
			errs = append(errs, field.TooLong(p.Child("url"), "", maxSourceLength))
		} else if !sourceURLPattern.MatchString(s.URL) {
			errs = append(errs, field.Invalid(p.Child("url"), s.URL, "must be an http or https URL"))
		}
	case s.File != "":
		// The repository must not be left.
		if len(s.File) > maxSourceLength {
			errs = append(errs, field.TooLong(p.Child("file"), "", maxSourceLength))
		} else if !sourceFilePattern.MatchString(s.File) {
			errs = append(errs, field.Invalid(p.Child("file"), s.File, "must be a relative path in the image repository, without .."))
		}
	default:
		errs = append(errs, field.Required(p, "one of url, file or containerDisk"))
	}
	if s.Checksum != "" && !checksumPattern.MatchString(s.Checksum) {
		errs = append(errs, field.Invalid(p.Child("checksum"), s.Checksum, "must be sha256: and 64 hex digits, or sha512: and 128"))
	}
	return errs
}
