// Command rusage runs a command and writes the CPU time and peak RSS that
// wait4 reports for it to file descriptor 3, as "user_ns sys_ns maxrss_KiB".
// BenchmarkRenderVsHelm runs kubectl-vm and helm through it: for a child
// of the benchmark itself, wait4 reports the benchmark's own peak RSS
// (os/exec starts children with vfork, and exec carries the parent's
// high-water mark over), while this parent stays small.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: rusage COMMAND [ARG...] 3>FILE")
		os.Exit(2)
	}
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	if _, err := fmt.Fprintf(os.NewFile(3, "rusage"), "%d %d %d\n", ru.Utime.Nano(), ru.Stime.Nano(), ru.Maxrss); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(cmd.ProcessState.ExitCode())
}
