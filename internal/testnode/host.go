package testnode

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// kubeletSysctls are the kernel settings the kubelet changes at start
// (its "kernel tunables"); the node puts back what was there.
var kubeletSysctls = []string{"kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory"}

// deviceDirs are fixed host paths the kubelet creates whatever its root
// directory; the node removes those that were not there before.
var deviceDirs = []string{"/var/lib/kubelet/device-plugins", "/var/lib/kubelet"}

// hostState records what the node changes on the host and undoes it.
type hostState struct {
	sysctls map[string]string
	// chains are the iptables chains per "command table" before the start.
	chains  map[string][]string
	newDirs []string
	undos   []undo
}

type undo struct {
	what string
	do   func() error
}

var iptablesTables = [][2]string{{"iptables", "filter"}, {"iptables", "nat"}, {"iptables", "mangle"},
	{"ip6tables", "filter"}, {"ip6tables", "nat"}, {"ip6tables", "mangle"}}

// record notes the host's state before the node changes it.
func (h *hostState) record() error {
	h.sysctls = map[string]string{}
	for _, k := range kubeletSysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return err
		}
		h.sysctls[k] = strings.TrimSpace(string(b))
	}
	h.chains = map[string][]string{}
	for _, t := range iptablesTables {
		chains, err := listChains(t[0], t[1])
		if err != nil {
			continue // e.g. no ip6tables nat table in this kernel
		}
		h.chains[t[0]+" "+t[1]] = chains
	}
	for _, d := range deviceDirs {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			h.newDirs = append(h.newDirs, d)
		}
	}
	return nil
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
	for k, v := range h.sysctls {
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s: %w", k, err))
		}
	}
	for key, before := range h.chains {
		cmd, table, _ := strings.Cut(key, " ")
		errs = append(errs, removeNewChains(cmd, table, before)...)
	}
	for _, d := range h.newDirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, err)
		}
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
		f := strings.Fields(line)
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

// cleanStale removes what a node of a killed test run left: its bridge and
// rules. (Its loop devices point into a removed directory: see detachLoops.)
func cleanStale() {
	_ = exec.Command("ip", "link", "del", Bridge).Run()
	for _, t := range []string{"filter", "nat"} {
		out, err := exec.Command("iptables", "-t", t, "-S").Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, ruleComment) || !strings.HasPrefix(line, "-A ") {
				continue
			}
			_ = exec.Command("iptables", append([]string{"-t", t, "-D"}, unquote(strings.Fields(line)[1:])...)...).Run()
		}
	}
	detachLoopsOf(func(back string) bool { return strings.Contains(back, "/vmop-node-") })
}

// unquote drops the quotes iptables -S puts around a comment.
func unquote(f []string) []string {
	for i := range f {
		f[i] = strings.Trim(f[i], `"`)
	}
	return f
}
