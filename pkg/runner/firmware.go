package runner

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Firmware is the UEFI code and the VM's own copy of its variables; both
// empty for bios (qemu's built-in SeaBIOS).
type Firmware struct {
	Code, Vars string
	Secure     bool // secure boot: the flash is locked to SMM
	SMM        bool
}

// firmwareFiles lists the OVMF code and variable templates per firmware,
// as Debian (/usr/share/OVMF), Fedora (/usr/share/edk2/ovmf) and Arch
// (/usr/share/edk2/x64) name them. The secure variants start with
// Microsoft's keys enrolled, so that Windows boots.
var firmwareFiles = map[string]struct{ code, vars []string }{
	"uefi": {
		code: []string{"/usr/share/OVMF/OVMF_CODE.fd", "/usr/share/edk2/ovmf/OVMF_CODE.fd", "/usr/share/edk2/x64/OVMF_CODE.fd"},
		vars: []string{"/usr/share/OVMF/OVMF_VARS.fd", "/usr/share/edk2/ovmf/OVMF_VARS.fd", "/usr/share/edk2/x64/OVMF_VARS.fd"},
	},
	"uefi-4m": {
		code: []string{"/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/edk2/ovmf-4m/OVMF_CODE.fd", "/usr/share/edk2/x64/OVMF_CODE.4m.fd"},
		vars: []string{"/usr/share/OVMF/OVMF_VARS_4M.fd", "/usr/share/edk2/ovmf-4m/OVMF_VARS.fd", "/usr/share/edk2/x64/OVMF_VARS.4m.fd"},
	},
	"secure": {
		code: []string{"/usr/share/OVMF/OVMF_CODE.secboot.fd", "/usr/share/edk2/ovmf/OVMF_CODE.secboot.fd", "/usr/share/edk2/x64/OVMF_CODE.secboot.fd"},
		vars: []string{"/usr/share/OVMF/OVMF_VARS.ms.fd", "/usr/share/edk2/ovmf/OVMF_VARS.secboot.fd", "/usr/share/edk2/x64/OVMF_VARS.fd"},
	},
	"secure-4m": {
		code: []string{"/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/edk2/ovmf-4m/OVMF_CODE.secboot.fd", "/usr/share/edk2/x64/OVMF_CODE.secboot.4m.fd"},
		vars: []string{"/usr/share/OVMF/OVMF_VARS_4M.ms.fd", "/usr/share/edk2/ovmf-4m/OVMF_VARS.secboot.fd", "/usr/share/edk2/x64/OVMF_VARS.4m.fd"},
	},
}

// FindFirmware picks the firmware files for kind. The variables are the
// VM's own: copied from the template into dataDir once, then kept, since
// they hold the boot order and secure-boot keys the guest set.
func FindFirmware(kind, dataDir string) (Firmware, error) {
	if kind == "bios" {
		return Firmware{}, nil
	}
	files, ok := firmwareFiles[kind]
	if !ok {
		return Firmware{}, fmt.Errorf("unknown firmware %q", kind)
	}
	code, err := firstExisting(files.code)
	if err != nil {
		return Firmware{}, fmt.Errorf("firmware %s: %w (install ovmf)", kind, err)
	}
	template, err := firstExisting(files.vars)
	if err != nil {
		return Firmware{}, fmt.Errorf("firmware %s: %w (install ovmf)", kind, err)
	}
	vars := filepath.Join(dataDir, "fw-vars.fd")
	if _, err := os.Stat(vars); errors.Is(err, os.ErrNotExist) {
		if err := copyFile(template, vars); err != nil {
			return Firmware{}, fmt.Errorf("firmware variables: %w", err)
		}
	} else if err != nil {
		return Firmware{}, err
	}
	secure := kind == "secure" || kind == "secure-4m"
	return Firmware{Code: code, Vars: vars, Secure: secure, SMM: secure}, nil
}

func firstExisting(paths []string) (string, error) {
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of %v exists", paths)
}

// copyFile copies through a temporary file, so that a crash never leaves
// half a variable store behind.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := to + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, to)
}
