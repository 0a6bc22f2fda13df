package testnode

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vmop/vmop/test/harness/testcache"
	"github.com/vmop/vmop/test/harness/testcontainerd"
)

// kubeletSysctls are the kernel settings the kubelet changes at start
// (its "kernel tunables"); the node puts back what was there.
var kubeletSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}

// deviceDirs are fixed host paths the kubelet creates whatever its root
// directory; the node removes those that were not there before.
var deviceDirs = []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet"}

// hostState records what the node changes on the host and undoes it.
// What the host had before is also kept in stateFile, so that a run after
// a killed one can put it back.
type hostState struct {
	Sysctls map[string]string
	// Chains are the iptables chains per "command table" before the start.
	Chains map[string][]string
	// Counters are the kernel's nfacct counters before the start (nil
	// when not recorded): kube-proxy adds its own, which outlive it.
	Counters []string
	NewDirs  []string
	undos    []undo
}

// stateFile keeps a running node's hostState; its name is not one of a
// node's directory (dirPrefix), which cleanStale removes before it reads
// this.
var stateFile = filepath.Join(os.TempDir(), "vmop-testnode.host.json")

type undo struct {
	what string
	do   func() error
}

var iptablesTables = [][2]string{{"iptables", "filter"}, {"iptables", "nat"}, {"iptables", "mangle"},
	{"ip6tables", "filter"}, {"ip6tables", "nat"}, {"ip6tables", "mangle"}}

// record notes the host's state before the node changes it.
func (h *hostState) record() error {
	h.Sysctls = map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return err
		}
		h.Sysctls[k] = strings.TrimSpace(string(b))
	}
	h.Chains = map[string][]string{}
	for _, t := range iptablesTables {
		chains, err := listChains(t[0], t[1])
		if err != nil {
			continue // e.g. no ip6tables nat table in this kernel
		}
		h.Chains[t[0]+" "+t[1]] = chains
	}
	var err error
	if h.Counters, err = nfacctCounters(); err != nil {
		return err
	}
	for _, d := range deviceDirs {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			h.NewDirs = append(h.NewDirs, d)
		}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return os.WriteFile(stateFile, b, 0o600)
}

// undo adds a change to put back, in reverse order, on restore.
func (h *hostState) undo(what string, do func() error) {
	h.undos = append(h.undos, undo{what, do})
}

// insertRule puts an iptables rule, marked as the node's, first in chain.
func (h *hostState) insertRule(table, chain string, rule ...string) error {
	rule = append(rule, "-m", "comment", "--comment", ruleComment)
	if err := run("iptables", append([]string{"-t", table, "-I", chain, "1"}, rule...)...); err != nil {
		return err
	}
	h.undo("iptables rule", func() error {
		return run("iptables", append([]string{"-t", table, "-D", chain}, rule...)...)
	})
	return nil
}

// restore undoes every change and returns what failed.
func (h *hostState) restore() []error {
	var errs []error
	for i := len(h.undos) - 1; i >= 0; i-- {
		if err := h.undos[i].do(); err != nil {
			errs = append(errs, fmt.Errorf("undo %s: %w", h.undos[i].what, err))
		}
	}
	h.undos = nil
	for k, v := range h.Sysctls {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	for key, before := range h.Chains {
		cmd, table, _ := strings.Cut(key, " ")
		errs = append(errs, removeNewChains(cmd, table, before)...)
	}
	// After the chains: their rules hold the counters.
	if h.Counters != nil {
		errs = append(errs, removeNewCounters(h.Counters)...)
	}
	for _, d := range h.NewDirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
	}
	if h.Sysctls != nil {
		_ = os.Remove(stateFile)
	}
	return errs
}

func listChains(cmd, table string) ([]string, error) {
	out, err := exec.Command(cmd, "-t", table, "-S").Output()
	if err != nil {
		return nil, err
	}
	var chains []string
	for _, line := range strings.Split(string(out), "\n") {
		if c, ok := strings.CutPrefix(line, "-N "); ok {
			chains = append(chains, c)
		}
	}
	return chains, nil
}

// removeNewChains deletes the chains of table that were not in before (the
// kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY, ...), with the rules that
// jump to them.
func removeNewChains(cmd, table string, before []string) []error {
	now, err := listChains(cmd, table)
	if err != nil {
		return nil
	}
	var added []string
	for _, c := range now {
		if !slices.Contains(before, c) {
			added = append(added, c)
		}
	}
	if len(added) == 0 {
		return nil
	}
	out, err := exec.Command(cmd, "-t", table, "-S").Output()
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, line := range strings.Split(string(out), "\n") {
		f := ruleArgs(line)
		if len(f) < 2 || f[0] != "-A" || slices.Contains(added, f[1]) {
			continue
		}
		if i := slices.Index(f, "-j"); i >= 0 && i+1 < len(f) && slices.Contains(added, f[i+1]) {
			if err := run(cmd, append([]string{"-t", table, "-D"}, f[1:]...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, c := range added {
		if err := run(cmd, "-t", table, "-F", c); err != nil {
			errs = append(errs, err)
		}
	}
	for _, c := range added {
		if err := run(cmd, "-t", table, "-X", c); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// nfacctCounters lists the names of the kernel's nfacct counters.
func nfacctCounters() ([]string, error) {
	out, err := exec.Command("nfacct", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("nfacct list: %w", err)
	}
	names := []string{}
	for _, line := range strings.Split(string(out), "\n") {
		// { pkts = 00000000000000000000, bytes = 00000000000000000000 } = NAME;
		if i := strings.LastIndex(line, " = "); i >= 0 {
			names = append(names, strings.TrimSuffix(line[i+3:], ";"))
		}
	}
	return names, nil
}

// removeNewCounters deletes the nfacct counters that were not in before
// (kube-proxy's ct_state_invalid_dropped_pkts, ...).
func removeNewCounters(before []string) []error {
	now, err := nfacctCounters()
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, c := range now {
		if !slices.Contains(before, c) {
			if err := run("nfacct", "delete", c); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// dirPrefix starts the name of a node's directory in the system's
// temporary directory.
const dirPrefix = "vmop-testnode-"

// lockNode waits until no other node runs on the machine (test binaries of
// several packages run at once) and returns the release.
func lockNode() (func(), error) {
	return testcache.Lock(filepath.Join(os.TempDir(), "vmop-testnode.lock"))
}

// prepareHost readies the host for a node (the caller holds the lock):
// it removes what killed runs left and shares netnsDir.
func prepareHost() error {
	cleanStale()
	return shareNetnsDir()
}

// netnsDir is where containerd and ip netns keep network namespaces.
const netnsDir = "/run/netns"

// shareNetnsDir makes netnsDir the shared mount point that ip netns makes
// the first time it runs. Made later, beside a running node (other
// packages' tests run ip netns add), that mount hides the namespaces
// containerd mounted on the plain directory: containerd can then no longer
// remove them, and no pod of the node stops. It stays, as ip netns leaves
// it.
func shareNetnsDir() error {
	if err := os.MkdirAll(netnsDir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if err == unix.EINVAL { // not a mount point yet
		if err = unix.Mount(netnsDir, netnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", netnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("sharing %s as ip netns does: %w", netnsDir, err)
	}
	return nil
}

// cleanStale removes what nodes of killed test runs left (the caller holds
// the lock, so every node directory is stale): their containers (runc's
// state for containerd's k8s.io namespace names each one's bundle, inside
// the node's directory), processes, mounts, loop devices, bridge and
// rules.
func cleanStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	if len(dirs) > 0 {
		killContainers(dirs)
		killStaleProcesses(dirs)
	}
	for _, d := range dirs {
		testcontainerd.UnmountBelow(d)
		detachLoopsOf(func(back string) bool { return strings.HasPrefix(back, d+"/") || isThin(back) })
		os.RemoveAll(d)
	}
	removePodNetworks()
	_ = exec.Command("ip", "link", "del", Bridge).Run()
	if b, err := os.ReadFile(stateFile); err == nil {
		var h hostState
		if json.Unmarshal(b, &h) == nil {
			h.restore()
		}
		os.Remove(stateFile)
	}
	for _, t := range []string{"filter", "mangle"} {
		out, err := exec.Command("iptables", "-t", t, "-S").Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, ruleComment) || !strings.HasPrefix(line, "-A ") {
				continue
			}
			_ = exec.Command("iptables", append([]string{"-t", t, "-D"}, ruleArgs(line)[1:]...)...).Run()
		}
	}
}

// removePodNetworks deletes the network namespaces of the node's pods
// (those with an address of its subnet) that containerd did not remove: a
// pod the kubelet had not finished stopping, or a killed run's.
func removePodNetworks() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		addrs, _ := exec.Command("ip", "-n", f[0], "-4", "-o", "addr").Output()
		if strings.Contains(string(addrs), " "+subnetPrefix) {
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
		}
	}
}

// runcRoot is where the runc shims of containerd's k8s.io namespace keep
// their containers' state, whatever containerd's own directories.
const runcRoot = "/run/containerd/runc/k8s.io"

// killContainers kills and deletes, with runc itself, the containers whose
// bundles are in dirs: those of a killed run, and those a stuck stop (the
// CRI waits out a pod's grace period) keeps alive at the end of a test.
func killContainers(dirs []string) {
	out, err := exec.Command("runc", "--root", runcRoot, "list", "--format", "json").Output()
	if err != nil {
		return
	}
	var list []struct {
		ID     string `json:"id"`
		Bundle string `json:"bundle"`
	}
	if json.Unmarshal(out, &list) != nil {
		return
	}
	for _, c := range list {
		if !underAny(c.Bundle, dirs) {
			continue
		}
		_ = exec.Command("runc", "--root", runcRoot, "kill", "--all", c.ID, "KILL").Run()
		for range 50 {
			if exec.Command("runc", "--root", runcRoot, "delete", "--force", c.ID).Run() == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// killStaleProcesses kills the processes whose command line names a stale
// directory: containerd's shims, which outlive their containerd.
func killStaleProcesses(dirs []string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if underAny(arg, dirs) {
				if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				break
			}
		}
	}
}

func underAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// ruleArgs splits a line of iptables -S into the arguments that make the
// rule again: iptables quotes those with spaces (kube-proxy's comments),
// escaping quotes and backslashes in them.
func ruleArgs(line string) []string {
	var args []string
	var arg strings.Builder
	inArg, quoted, escaped := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			arg.WriteRune(r)
			escaped = false
		case quoted && r == '\\':
			escaped = true
		case r == '"':
			quoted, inArg = !quoted, true
		case r == ' ' && !quoted:
			if inArg {
				args = append(args, arg.String())
				arg.Reset()
				inArg = false
			}
		default:
			arg.WriteRune(r)
			inArg = true
		}
	}
	if inArg {
		args = append(args, arg.String())
	}
	return args
}
