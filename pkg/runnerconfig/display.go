package runnerconfig

// DisplayPasswordCommand is what kubectl vm console runs in the VM's pod
// (through pods/exec) to hand the runner a display password, on stdin so
// that it shows on no command line, with qemu's expiry (+SECONDS, now,
// never). The runner sets it at once, with no wait for the kubelet to
// refresh the display Secret's volume.
func DisplayPasswordCommand(expiry string) []string {
	return []string{"vm-runner", "display-password", "--expiry", expiry}
}

// Exit codes of vm-runner display-password besides 0 (set) and
// ExitConfig (a usage error: also what a runner older than the command
// answers).
const (
	// ExitPasswordFailed: the runner did not set the password; stderr
	// says why.
	ExitPasswordFailed = 1
	// ExitDisplayWithoutPassword: the VM's display runs without a
	// password (it opted out), so there is none to set.
	ExitDisplayWithoutPassword = 3
)
