package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/vmop/vmop/pkg/vm-runner/runnerdata"
)

// Firmware is the UEFI code and the VM's own copy of its variables; both
// empty for bios (qemu's built-in SeaBIOS).
type Firmware struct {
	Code, Vars string
	Secure     bool // secure boot: the flash is locked to SMM
	SMM        bool
}

// flash is an OVMF code file and the template of its variables: a pair
// from one build, since the variables must fit the code's flash layout.
type flash struct{ code, vars string }

// firmwareFiles lists the OVMF builds per firmware, as Debian
// (/usr/share/OVMF), Fedora (/usr/share/edk2/ovmf) and Arch
// (/usr/share/edk2/x64) name them, in order of preference. Debian 13 and
// newer edk2 builds have only the 4 MiB flash: uefi and secure fall back
// to it. The secure variants start with Microsoft's keys enrolled, so that
// Windows boots.
var firmwareFiles = map[string][]flash{
	"uefi": {
		{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/OVMF/OVMF_VARS.fd"},
		{"/usr/share/edk2/ovmf/OVMF_CODE.fd", "/usr/share/edk2/ovmf/OVMF_VARS.fd"},
		{"/usr/share/edk2/x64/OVMF_CODE.fd", "/usr/share/edk2/x64/OVMF_VARS.fd"},
		{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"},
		{"/usr/share/edk2/ovmf-4m/OVMF_CODE.fd", "/usr/share/edk2/ovmf-4m/OVMF_VARS.fd"},
	},
	"uefi-4m": {
		{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"},
		{"/usr/share/edk2/ovmf-4m/OVMF_CODE.fd", "/usr/share/edk2/ovmf-4m/OVMF_VARS.fd"},
		{"/usr/share/edk2/x64/OVMF_CODE.4m.fd", "/usr/share/edk2/x64/OVMF_VARS.4m.fd"},
	},
	"secure": {
		{"/usr/share/OVMF/OVMF_CODE.secboot.fd", "/usr/share/OVMF/OVMF_VARS.ms.fd"},
		{"/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd", "/usr/share/edk2/ovmf/OVMF_VARS.secboot.fd"},
		{"/usr/share/edk2/x64/OVMF_CODE.secboot.fd", "/usr/share/edk2/x64/OVMF_VARS.fd"},
		{"/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"},
		{"/usr/share/edk2/ovmf-4m/OVMF_CODE.secboot.fd", "/usr/share/edk2/ovmf-4m/OVMF_VARS.secboot.fd"},
	},
	"secure-4m": {
		{"/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"},
		{"/usr/share/edk2/ovmf-4m/OVMF_CODE.secboot.fd", "/usr/share/edk2/ovmf-4m/OVMF_VARS.secboot.fd"},
		{"/usr/share/edk2/x64/OVMF_CODE.secboot.4m.fd", "/usr/share/edk2/x64/OVMF_VARS.4m.fd"},
	},
}

// FindFirmware picks the firmware files for kind. The variables are the
// VM's own: copied from the template into dataDir once, then kept, since
// they hold the boot order and secure-boot keys the guest set.
func FindFirmware(kind, dataDir string) (Firmware, error) {
	if kind == "bios" {
		return Firmware{}, nil
	}
	builds, ok := firmwareFiles[kind]
	if !ok {
		return Firmware{}, fmt.Errorf("unknown firmware %q", kind)
	}
	fw, err := firstBuild(builds)
	if err != nil {
		return Firmware{}, fmt.Errorf("firmware %s: %w (install ovmf)", kind, err)
	}
	vars := filepath.Join(dataDir, "fw-vars.fd")
	switch kept, err := os.Stat(vars); {
	case errors.Is(err, os.ErrNotExist):
		if err := copyFile(fw.vars, vars, 0o600); err != nil {
			return Firmware{}, fmt.Errorf("firmware variables: %w", err)
		}
	case err != nil:
		return Firmware{}, err
	default:
		// Kept from another firmware build (another runner image): qemu
		// would refuse the flash with a message about sizes.
		tmpl, err := os.Stat(fw.vars)
		if err != nil {
			return Firmware{}, err
		}
		if kept.Size() != tmpl.Size() {
			return Firmware{}, fmt.Errorf("firmware %s: the VM's variables %s (%d bytes) do not fit %s (variables %d bytes): "+
				"choose the firmware they were made with, or delete them to start with fresh variables (boot entries are lost)",
				kind, vars, kept.Size(), fw.code, tmpl.Size())
		}
	}
	secure := kind == "secure" || kind == "secure-4m"
	return Firmware{Code: fw.code, Vars: vars, Secure: secure, SMM: secure}, nil
}

// firstBuild is the first of builds whose files both exist.
func firstBuild(builds []flash) (flash, error) {
	var tried []string
	for _, b := range builds {
		if exists(b.code) && exists(b.vars) {
			return b, nil
		}
		tried = append(tried, b.code)
	}
	return flash{}, fmt.Errorf("none of %v exists", tried)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// copyFile copies from to to, with mode perm, as runnerdata.WriteFile does: a copy
// cut off is never taken for a whole one. from and to may be the same
// file.
func copyFile(from, to string, perm fs.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	return runnerdata.WriteFile(to, perm, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
