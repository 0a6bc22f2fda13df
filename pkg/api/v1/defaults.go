package v1

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// Defaults of fields that the manifest may leave out. They are applied in
// Go, not by the CRD schema, so that the stored object stays what the user
// wrote (no GitOps drift) and rendering without a cluster gives the same
// result as the operator.
const (
	DefaultPowerdownTimeout = 900
	DefaultMaximumRAM       = Quantity("1Gi")
	DefaultRTCBase          = "utc"
	DefaultRTCClock         = "rt"
	DefaultNetDevice        = "virtio-net"
	DefaultBridge           = "br0"
	// DefaultPodNet is the guest's side of a pod network: slirp's, so that
	// a guest configured for a user network works unchanged.
	DefaultPodNet       = "10.0.2.0/24"
	DefaultSpicePort    = 5900
	DefaultUsbRedirects = 2
)

// Default fills in every optional field that has a default, in place,
// but spec.image: a VM without one runs the runner image of the
// renderer's build (pkg/render), which the API's types do not know.
// Call it on a copy when the original must stay as written.
func (vm *VirtualMachine) Default() {
	s := &vm.Spec
	if s.Image != nil && s.Image.PullPolicy == "" {
		s.Image.PullPolicy = corev1.PullIfNotPresent
	}
	if s.RunnerTemplate != nil && s.RunnerTemplate.Update == nil {
		s.RunnerTemplate.Update = ptr.To(true)
	}
	s.VM.Default()
}

// Sizes are the vCPUs and memory the spec asks the VM to run with:
// currentCpus and currentRam, with their defaults.
func (v *VMSpec) Sizes() (int32, Quantity) {
	s := VMSpec{CPUTopology: v.CPUTopology, MaximumCPUs: v.MaximumCPUs, CurrentCPUs: v.CurrentCPUs,
		MaximumRAM: v.MaximumRAM, CurrentRAM: v.CurrentRAM}
	s.defaultSizes()
	return *s.CurrentCPUs, s.CurrentRAM
}

// defaultSizes fills in the CPU and memory sizes.
func (v *VMSpec) defaultSizes() {
	if v.MaximumCPUs == nil {
		// Like VM-Operator's runner: the maximum follows the topology or
		// an explicit current count rather than refusing the manifest.
		n := int32(min(max(v.CPUTopology.product(), 1), MaxCPUs+1)) // validation reports too many
		if v.CurrentCPUs != nil {
			n = max(n, *v.CurrentCPUs)
		}
		v.MaximumCPUs = &n
	}
	if v.CurrentCPUs == nil {
		v.CurrentCPUs = ptr.To(*v.MaximumCPUs)
	}
	if v.MaximumRAM == "" {
		v.MaximumRAM = DefaultMaximumRAM
	}
	if v.CurrentRAM == "" {
		v.CurrentRAM = v.MaximumRAM
	}
}

// Default fills in the defaults of the VM part.
func (v *VMSpec) Default() {
	if v.State == "" {
		v.State = StateStopped
	}
	if v.Firmware == "" {
		v.Firmware = FirmwareUEFI
	}
	if v.PowerdownTimeout == nil {
		v.PowerdownTimeout = ptr.To[int64](DefaultPowerdownTimeout)
	}
	v.defaultSizes()
	if v.RTCBase == "" {
		v.RTCBase = DefaultRTCBase
	}
	if v.RTCClock == "" {
		v.RTCClock = DefaultRTCClock
	}
	for i := range v.Networks {
		n := &v.Networks[i]
		switch {
		case n.Tap != nil:
			if n.Tap.Device == "" {
				n.Tap.Device = DefaultNetDevice
			}
			if n.Tap.Bridge == "" {
				n.Tap.Bridge = DefaultBridge
			}
		case n.User != nil:
			if n.User.Device == "" {
				n.User.Device = DefaultNetDevice
			}
		case n.Pod != nil:
			if n.Pod.Device == "" {
				n.Pod.Device = DefaultNetDevice
			}
			if n.Pod.Net == "" {
				n.Pod.Net = DefaultPodNet
			}
			for j := range n.Pod.Ports {
				if n.Pod.Ports[j].Protocol == "" {
					n.Pod.Ports[j].Protocol = corev1.ProtocolTCP
				}
			}
		}
	}
	for i := range v.Disks {
		if t := v.Disks[i].VolumeClaimTemplate; t != nil {
			if len(t.Spec.AccessModes) == 0 {
				t.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}
			}
			if t.Spec.VolumeMode == nil {
				t.Spec.VolumeMode = ptr.To(corev1.PersistentVolumeBlock)
			}
		}
	}
	if v.Display == nil {
		v.Display = &Display{Spice: &Spice{}}
	}
	if v.Display.Outputs == nil {
		v.Display.Outputs = ptr.To[int32](1)
	}
	if sp := v.Display.Spice; sp != nil {
		if sp.Port == nil {
			sp.Port = ptr.To[int32](DefaultSpicePort)
		}
		if sp.UsbRedirects == nil {
			sp.UsbRedirects = ptr.To[int32](DefaultUsbRedirects)
		}
		if sp.GenerateSecret == nil {
			sp.GenerateSecret = ptr.To(true)
		}
	}
}

// product is the number of CPUs the topology describes, 0 without one.
// It is int64: four int32 factors overflow int32.
func (t *CPUTopology) product() int64 {
	if t == nil {
		return 0
	}
	n := int64(1)
	for _, f := range []int32{t.Sockets, t.DiesPerSocket, t.CoresPerDie, t.ThreadsPerCore} {
		if f > 0 {
			n *= int64(f)
		}
	}
	return n
}

// DiskName is the name of the i-th disk's volume, device and PVC template:
// "<name>-disk", or "disk-<i>" when the template has no name.
func (v *VMSpec) DiskName(i int) string {
	if t := v.Disks[i].VolumeClaimTemplate; t != nil && t.Metadata.Name != "" {
		return t.Metadata.Name + "-disk"
	}
	return "disk-" + strconv.Itoa(i)
}
