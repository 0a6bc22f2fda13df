// Package cloudinit is the NoCloud seed disk of a VM: the meta-data,
// user-data and network-config files, their defaults, and the ISO9660
// image (volume label "cidata") that qemu attaches for cloud-init.
package cloudinit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// NoCloud file names.
const (
	MetaDataFile      = "meta-data"
	UserDataFile      = "user-data"
	NetworkConfigFile = "network-config"
)

const cloudConfigHeader = "#cloud-config\n"

// Data holds the contents of the NoCloud files. An empty NetworkConfig
// means there is none.
type Data struct {
	MetaData, UserData, NetworkConfig []byte
}

// FromConfig builds the files from inline runner config and applies
// Default. Maps become YAML. userData may be a string, used as written
// (see Default for when "#cloud-config" is added), or an object, which
// becomes a #cloud-config document. A nil ci gives an empty seed.
func FromConfig(ci *runnerconfig.CloudInit, vmName string) (Data, error) {
	var d Data
	if ci != nil {
		var err error
		if len(ci.MetaData) > 0 {
			if d.MetaData, err = manifest.Marshal(ci.MetaData); err != nil {
				return Data{}, fmt.Errorf("%s: cloudInit.metaData: %w", vmName, err)
			}
		}
		if d.UserData, err = userData(ci.UserData); err != nil {
			return Data{}, fmt.Errorf("%s: cloudInit.userData: %w", vmName, err)
		}
		if len(ci.NetworkConfig) > 0 {
			if d.NetworkConfig, err = manifest.Marshal(ci.NetworkConfig); err != nil {
				return Data{}, fmt.Errorf("%s: cloudInit.networkConfig: %w", vmName, err)
			}
		}
	}
	if err := d.Default(vmName); err != nil {
		return Data{}, fmt.Errorf("%s: cloudInit: %w", vmName, err)
	}
	return d, nil
}

func userData(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case string:
		return []byte(v), nil
	}
	// Any other value must be a mapping: cloud-config is one, and a list
	// or scalar behind "#cloud-config" would only fail in the guest.
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	j = bytes.TrimSpace(j)
	if string(j) == "null" {
		return nil, nil
	}
	if len(j) == 0 || j[0] != '{' {
		return nil, fmt.Errorf("must be a string or an object, not %T", v)
	}
	// manifest.Marshal, not yaml.JSONToYAML: yaml.v2 refuses to read back
	// the DEL and C1 characters that encoding/json leaves unescaped.
	y, err := manifest.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append([]byte(cloudConfigHeader), y...), nil
}

// FromDir reads the files from dir, where the pod projects the VM's
// cloud-init Secret. ok is false when dir does not exist or holds none
// of them.
func FromDir(dir string) (d Data, ok bool, err error) {
	for _, f := range []struct {
		name string
		dst  *[]byte
	}{{MetaDataFile, &d.MetaData}, {UserDataFile, &d.UserData}, {NetworkConfigFile, &d.NetworkConfig}} {
		b, err := os.ReadFile(filepath.Join(dir, f.name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return Data{}, false, err
		}
		*f.dst, ok = b, true
	}
	return d, ok, nil
}

// Default fills in what NoCloud needs and the user rarely writes:
//   - meta-data local-hostname: the VM's name;
//   - meta-data instance-id: "iid-" and a hash of all three files, so
//     that cloud-init in the guest runs again exactly when they change;
//   - user-data "#cloud-config" as first line when the user-data is a
//     YAML mapping without a "#" header. cloud-init ignores user-data
//     without a known header ("#cloud-config", "#!", "#include", ...), so
//     such a mapping can only have been meant as cloud-config. Anything
//     else (a script, MIME multipart, gzip) is left as written.
//
// A key that is null or "" counts as missing. Meta-data that lacks a key
// is written anew as YAML with sorted keys; complete meta-data is kept
// byte for byte. On error d is unchanged.
func (d *Data) Default(vmName string) error {
	var meta map[string]any
	if err := yaml.Unmarshal(d.MetaData, &meta, useNumber); err != nil {
		return fmt.Errorf("%s: not a YAML mapping: %w", MetaDataFile, err)
	}
	if meta == nil {
		meta = map[string]any{}
	}
	user := d.UserData
	if needsCloudConfigHeader(user) {
		user = append([]byte(cloudConfigHeader), user...)
	}
	changed := false
	if missing(meta, "local-hostname") {
		meta["local-hostname"] = vmName
		changed = true
	}
	if missing(meta, "instance-id") {
		id, err := instanceID(user, d.NetworkConfig, meta)
		if err != nil {
			return fmt.Errorf("%s: %w", MetaDataFile, err)
		}
		meta["instance-id"] = id
		changed = true
	}
	metaData := d.MetaData
	if changed {
		var err error
		if metaData, err = manifest.Marshal(meta); err != nil {
			return fmt.Errorf("%s: %w", MetaDataFile, err)
		}
	}
	d.MetaData, d.UserData = metaData, user
	return nil
}

// useNumber keeps numbers in meta-data exact when it is written anew.
func useNumber(d *json.Decoder) *json.Decoder {
	d.UseNumber()
	return d
}

func missing(m map[string]any, k string) bool {
	v, ok := m[k]
	return !ok || v == nil || v == ""
}

// instanceID hashes each part with its length, so that moving bytes
// from one file to another still gives a new id.
func instanceID(user, network []byte, meta map[string]any) (string, error) {
	metaJSON, err := json.Marshal(meta) // sorted keys: deterministic
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, p := range [][]byte{user, network, metaJSON} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return "iid-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// needsCloudConfigHeader tells whether user-data is a YAML mapping that
// cloud-init would ignore for lack of a header.
func needsCloudConfigHeader(b []byte) bool {
	if len(bytes.TrimSpace(b)) == 0 || b[0] == '#' {
		return false
	}
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) { // gzip: cloud-init unpacks it
		return false
	}
	// cloud-init takes this as its sign of a MIME multipart message.
	head := b[:min(len(b), 4096)]
	if bytes.Contains(bytes.ToLower(head), []byte("mime-version:")) {
		return false
	}
	var m map[string]any
	return yaml.Unmarshal(b, &m) == nil && m != nil
}
