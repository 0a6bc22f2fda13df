package create

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
)

// containerDiskScheme starts an --image that is a containerDisk image,
// as CDI's registry sources are written.
const containerDiskScheme = "docker://"

// volumeModes are the values of --volume-mode.
var volumeModes = []string{string(corev1.PersistentVolumeBlock), string(corev1.PersistentVolumeFilesystem)}

// Values of --network.
const (
	networkPod  = "pod"
	networkUser = "user"
	networkTap  = "tap"
	networkNone = "none"
)

// Names of the disks' volume claim templates (see v1.VMSpec.DiskName).
const (
	systemDisk = "system"
	dataDisk   = "data-"
)

// maxFileSize bounds what --cloud-init-user-data and --ssh-key read: the
// VM is stored in etcd, whose objects are limited to about 1.5 MiB.
const maxFileSize = 1 << 20

// build makes the VM from the flags. It checks only what v1's validation
// cannot see, the syntax of the flags and the files they name, and
// reports every such problem at once.
func (o *Options) build() (*v1.VirtualMachine, error) {
	var errs []error
	vm := &v1.VirtualMachine{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.APIVersion, Kind: v1.Kind},
		ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.namespace},
	}
	s := &vm.Spec.VM
	s.State = v1.StateStopped
	if o.Running {
		s.State = v1.StateRunning
	}
	if o.given("cpus") {
		s.CurrentCPUs = ptr.To(o.CPUs)
		// At least 1, so that v1 blames currentCpus (--cpus) for a
		// count below 1, not a maximum the user did not give.
		s.MaximumCPUs = ptr.To(max(o.CPUs, 1))
	}
	if o.given("max-cpus") {
		s.MaximumCPUs = ptr.To(o.MaxCPUs)
	}
	if o.given("ram") {
		s.CurrentRAM = v1.Quantity(o.RAM)
		s.MaximumRAM = v1.Quantity(o.RAM)
	}
	if o.given("max-ram") {
		s.MaximumRAM = v1.Quantity(o.MaxRAM)
	}
	switch {
	case o.Image != "" && len(o.Disks) == 0:
		errs = append(errs, errors.New("--image fills the system disk: give a --disk too"))
	case o.ImageChecksum != "" && o.Image == "":
		errs = append(errs, errors.New("--image-checksum checks --image: give an --image too"))
	}
	mode := corev1.PersistentVolumeMode(o.VolumeMode)
	if !slices.Contains(volumeModes, o.VolumeMode) {
		errs = append(errs, fmt.Errorf("--volume-mode %q is not supported: use %s", o.VolumeMode, strings.Join(volumeModes, " or ")))
	}
	networks, err := parseNetworks(o.Networks)
	errs = append(errs, err)
	s.Networks = networks
	for i, d := range o.Disks {
		size, class, err := ParseDisk(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("--disk %q: %w", d, err))
		}
		t := &v1.VolumeClaimTemplate{Metadata: v1.EmbeddedMetadata{Name: systemDisk}}
		t.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: size}
		if class != "" {
			t.Spec.StorageClassName = ptr.To(class)
		}
		if o.given("volume-mode") {
			t.Spec.VolumeMode = ptr.To(mode)
		}
		disk := v1.Disk{VolumeClaimTemplate: t}
		if i == 0 {
			disk.Bootindex = ptr.To[int32](0)
			disk.Source = o.source()
		} else {
			t.Metadata.Name = dataDisk + strconv.Itoa(i)
		}
		s.Disks = append(s.Disks, disk)
	}
	for i, image := range o.CDROMs {
		// After the system disk, in the order given.
		boot := int32(i)
		if len(o.Disks) > 0 {
			boot++
		}
		s.Disks = append(s.Disks, v1.Disk{CDROM: &v1.CDROM{Image: image}, Bootindex: ptr.To(boot)})
	}
	userData, err := o.userData()
	errs = append(errs, err)
	if userData != nil {
		vm.Spec.CloudInit = &v1.CloudInit{UserData: &v1.FreeForm{Raw: userData}}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return vm, nil
}

// ParseDisk parses a --disk value, SIZE[,STORAGECLASS]. The size's sign
// is left to v1's validation, which names the field.
func ParseDisk(s string) (size resource.Quantity, class string, err error) {
	sizeText, class, hasClass := strings.Cut(s, ",")
	size, err = resource.ParseQuantity(sizeText)
	if err != nil {
		return size, "", fmt.Errorf("%q is not a size such as 40Gi or 500G", sizeText)
	}
	if hasClass {
		if strings.Contains(class, ",") {
			return size, "", fmt.Errorf("give SIZE or SIZE,STORAGECLASS, not %d parts", strings.Count(s, ",")+1)
		}
		if class == "" {
			return size, "", fmt.Errorf("no storage class after the comma (leave out the comma for the cluster's default class)")
		}
		if msgs := validation.IsDNS1123Subdomain(class); len(msgs) > 0 {
			return size, "", fmt.Errorf("storage class %q: %s", class, strings.Join(msgs, "; "))
		}
	}
	return size, class, nil
}

// parseNetworks makes the networks of the --network values: the pod's
// network when none is given (a server is reachable like any pod), none
// for "none".
func parseNetworks(values []string) ([]v1.Network, error) {
	if len(values) == 0 {
		return []v1.Network{{Pod: &v1.PodNetwork{}}}, nil
	}
	var out []v1.Network
	for _, val := range values {
		kind, bridge, hasBridge := strings.Cut(val, ":")
		switch {
		case val == networkNone && len(values) == 1:
			return nil, nil
		case val == networkUser:
			out = append(out, v1.Network{User: &v1.UserNetwork{}})
		case val == networkPod:
			out = append(out, v1.Network{Pod: &v1.PodNetwork{}})
		case kind == networkTap && (!hasBridge || bridge != ""):
			// v1's validation checks the bridge's name.
			out = append(out, v1.Network{Tap: &v1.TapNetwork{Bridge: bridge}})
		case val == networkNone:
			return nil, fmt.Errorf("--network none cannot be combined with other networks")
		default:
			return nil, fmt.Errorf("--network %q: use pod, user, tap, tap:BRIDGE or none", val)
		}
	}
	return out, nil
}

// userData is the cloud-init user data (JSON) of --cloud-init-user-data
// and --ssh-key, nil when neither is given. The keys are appended to the
// top-level ssh_authorized_keys, cloud-init's list for the default user.
func (o *Options) userData() (json.RawMessage, error) {
	if o.UserDataFile == "" && len(o.SSHKeyFiles) == 0 {
		return nil, nil
	}
	data := map[string]any{}
	if o.UserDataFile != "" {
		var err error
		if data, err = readUserData(o.UserDataFile); err != nil {
			return nil, fmt.Errorf("--cloud-init-user-data %q: %w", o.UserDataFile, err)
		}
	}
	var keys []any
	if existing, ok := data[authorizedKeys]; ok {
		if keys, ok = existing.([]any); !ok {
			return nil, fmt.Errorf("--cloud-init-user-data %q: %s must be a list of keys", o.UserDataFile, authorizedKeys)
		}
	}
	for _, file := range o.SSHKeyFiles {
		found, err := readPublicKeys(file)
		if err != nil {
			return nil, fmt.Errorf("--ssh-key %q: %w", file, err)
		}
		for _, k := range found {
			keys = append(keys, k)
		}
	}
	if len(o.SSHKeyFiles) > 0 {
		data[authorizedKeys] = keys
	}
	return json.Marshal(data)
}

// authorizedKeys is cloud-config's list of keys of the default user.
const authorizedKeys = "ssh_authorized_keys"

// readUserData reads a cloud-config file: YAML whose document is a
// mapping.
func readUserData(file string) (map[string]any, error) {
	b, err := readFile(file)
	if err != nil {
		return nil, err
	}
	js, err := manifest.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	var data map[string]any
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber() // large integers stay exact
	if err := d.Decode(&data); err != nil || data == nil {
		return nil, fmt.Errorf("not cloud-config: the YAML must be a mapping (such as \"#cloud-config\\nhostname: vm\"), not %s", kindOf(js))
	}
	return data, nil
}

// kindOf names the kind of JSON value js.
func kindOf(js []byte) string {
	switch js = bytes.TrimSpace(js); {
	case len(js) == 0 || string(js) == "null":
		return "an empty document"
	case js[0] == '[':
		return "a list"
	default:
		return "a single value"
	}
}

// readPublicKeys returns the keys of an OpenSSH public key file (one key
// per line, as authorized_keys; empty lines and # comments skipped).
func readPublicKeys(file string) ([]string, error) {
	b, err := readFile(file)
	if err != nil {
		return nil, err
	}
	if bytes.Contains(b, []byte("PRIVATE KEY")) {
		return nil, fmt.Errorf("a private key: give the public key (the .pub file)")
	}
	var keys []string
	for n, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err != nil {
			return nil, fmt.Errorf("line %d: not an SSH public key (such as \"ssh-ed25519 AAAA... user@host\")", n+1)
		}
		keys = append(keys, line)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("no public key in the file")
	}
	return keys, nil
}

// readFile reads a file of at most maxFileSize bytes.
func readFile(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, unwrapPath(err)
	}
	defer f.Close()
	b, err := manifest.ReadAll(f, maxFileSize)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// unwrapPath drops the file name from an open error: the caller names it
// with its flag.
func unwrapPath(err error) error {
	if pe, ok := errors.AsType[*os.PathError](err); ok {
		return pe.Err
	}
	return err
}

// source is the system disk's source: --image is a URL when it has a
// scheme, else a file of the image repository.
func (o *Options) source() *v1.DiskSource {
	if o.Image == "" {
		return nil
	}
	src := &v1.DiskSource{File: o.Image, Checksum: o.ImageChecksum}
	switch ref, ok := strings.CutPrefix(o.Image, containerDiskScheme); {
	case ok:
		src.ContainerDisk, src.File = ref, ""
	case strings.Contains(o.Image, "://"):
		src.URL, src.File = o.Image, ""
	}
	return src
}
