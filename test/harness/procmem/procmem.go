// Package procmem reads a process's resident memory from /proc, split the
// way a VM's pod is looked at: the guest's RAM, TCG's translation cache,
// and the rest of qemu.
package procmem

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Qemu is a qemu process's resident memory in bytes.
type Qemu struct {
	RSS int64
	// Guest is the guest's RAM: the anonymous mapping of its size.
	Guest int64
	// Cache is TCG's translation cache: anonymous and executable.
	Cache int64
	// Files is what files back: qemu's binary and libraries.
	Files int64
}

// Beyond is what qemu holds beyond the guest's RAM; without the cache,
// what it would hold under KVM too.
func (q Qemu) Beyond(withCache bool) int64 {
	if withCache {
		return q.RSS - q.Guest
	}
	return q.RSS - q.Guest - q.Cache
}

// ReadQemu reads qemu's smaps; ramBytes is the size of the guest's RAM.
func ReadQemu(pid int, ramBytes int64) (Qemu, error) {
	var q Qemu
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return q, err
	}
	defer f.Close()
	var size, rss int64
	anon := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		switch {
		case !strings.HasSuffix(fields[0], ":"):
			// A mapping's header: range perms offset dev inode [path].
			anon = len(fields) < 6 || strings.HasPrefix(fields[5], "[")
		case fields[0] == "Size:":
			size = kib(fields[1])
		case fields[0] == "Rss:":
			rss = kib(fields[1])
		case fields[0] == "VmFlags:":
			q.RSS += rss
			switch {
			case !anon:
				q.Files += rss
			case size == ramBytes:
				q.Guest += rss
			case slices.Contains(fields[1:], "ex"):
				q.Cache += rss
			}
		}
	}
	return q, sc.Err()
}

// Rollup is a process's resident and proportional memory in bytes.
func Rollup(pid int) (rss, pss int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, err
	}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		switch f[0] {
		case "Rss:":
			rss = kib(f[1])
		case "Pss:":
			pss = kib(f[1])
		}
	}
	return rss, pss, nil
}

// RSS is a process's resident memory (VmRSS), in bytes.
func RSS(pid int) (int64, error) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS: %w", pid, err)
			}
			return kib << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// CPUSeconds is the user and system CPU time a process used so far.
func CPUSeconds(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// utime and stime are the 14th and 15th fields, in clock ticks (100
	// Hz); the command before them may hold spaces.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return float64(utime+stime) / 100, nil
}

// JIT is what qemu's "info jit" (HMP) says of its translation cache: the
// bytes of code generated into it, its size and how often it was flushed.
func JIT(info string) (code, size, flushes int64) {
	for line := range strings.Lines(info) {
		f := strings.Fields(line)
		switch {
		case strings.HasPrefix(line, "gen code size") && len(f) >= 4:
			used, total, _ := strings.Cut(f[3], "/")
			code, _ = strconv.ParseInt(used, 10, 64)
			size, _ = strconv.ParseInt(total, 10, 64)
		case strings.HasPrefix(line, "TB flush count") && len(f) >= 4:
			flushes, _ = strconv.ParseInt(f[3], 10, 64)
		}
	}
	return code, size, flushes
}

func kib(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n << 10
}
