// Package snapshotpush is what kubectl vm snapshot, the VM's runner and
// the snapshot pod exchange while a running VM's disks are copied into a
// snapshot: the request and its result, the disks, the connections' key
// and ports. It imports nothing of vmop, so that the plugin links none of
// the runner.
package snapshotpush

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// FirstPort is the NBD port of a snapshot pod's first export; the others
// follow it.
const FirstPort = 10809

// PSK is the pre-shared key of one snapshot's NBD connections: qemu's
// TLS PSK credentials, so that only the VM's qemu writes into the
// snapshot's claims and nobody else on the pod network reads them.
type PSK struct {
	Identity string
	// Key is hex, as qemu's keys.psk holds it.
	Key string
}

// pskFile is the file of qemu's tls-creds-psk object in its dir.
const pskFile = "keys.psk"

// ReadPSK reads "IDENTITY:HEXKEY" from the first line of r (kubectl vm
// snapshot hands it over through pods/exec's stdin, never an argument).
func ReadPSK(r io.Reader) (PSK, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return PSK{}, fmt.Errorf("reading the key: %w", err)
	}
	id, key, ok := strings.Cut(strings.TrimSpace(line), ":")
	if !ok || id == "" || strings.ContainsAny(id, " \t") {
		return PSK{}, errors.New("the key: want IDENTITY:HEXKEY on its first line")
	}
	if b, err := hex.DecodeString(key); err != nil || len(b) < 16 {
		return PSK{}, errors.New("the key: want at least 16 bytes in hex after the identity")
	}
	return PSK{Identity: id, Key: key}, nil
}

// String is the line ReadPSK reads.
func (p PSK) String() string { return p.Identity + ":" + p.Key }

// WriteDir writes the key where qemu's tls-creds-psk object reads it, in
// a new directory under parent only the caller's user can read; the
// caller removes it.
func (p PSK) WriteDir(parent string) (string, error) {
	dir, err := os.MkdirTemp(parent, "psk-")
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, pskFile), []byte(p.String()+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// PushRequest is what POST /push takes.
type PushRequest struct {
	// Snapshot names the snapshot, for the VM's events.
	Snapshot string `json:"snapshot"`
	// Host is the snapshot pod's address.
	Host    string       `json:"host"`
	Exports []PushExport `json:"exports"`
	// PSK is the connections' key, IDENTITY:HEXKEY.
	PSK string `json:"psk"`
}

// PushExport is where one disk goes.
type PushExport struct {
	// Disk is the disk's volume name (root-disk).
	Disk   string `json:"disk"`
	Export string `json:"export"`
	Port   int    `json:"port"`
}

// PushResult is what vm-runner snapshot push prints.
type PushResult struct {
	// Consistent: the guest's file systems were frozen while the copy
	// began; else the copy is crash-consistent, for the reason Why.
	Consistent bool   `json:"consistent"`
	Why        string `json:"why,omitempty"`
	// FrozenSeconds is how long the guest was frozen.
	FrozenSeconds float64 `json:"frozenSeconds"`
	// Bytes were copied, in Seconds.
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	// Data is the archive of the runner data (runnerdata.Archive) as it
	// was when the copy began.
	Data []byte `json:"data"`
}

// DiskInfo is one of the VM's disks as GET /disks tells it.
type DiskInfo struct {
	// Name is the disk's volume name.
	Name string `json:"name"`
	// Size is the disk's size in bytes as the guest sees it.
	Size int64 `json:"size"`
}
