// Package runnerexit holds vm-runner's exit codes. A pod's status carries
// its container's last exit code, so that vm-operator and kubectl vm status
// tell from it why a runner ended without linking the runner itself.
package runnerexit

const (
	Clean   = 0 // the guest shut down (by itself, or when asked)
	Failed  = 1 // the runner could not start the VM
	Config  = 2 // the config file is invalid; qemu was not started
	Forced  = 3 // the guest did not shut down within powerdownTimeout
	Crashed = 4 // qemu ended without a guest shutdown
	// QemuRefused: qemu exited while starting; the runner's error (its
	// termination message in a pod) ends with qemu's last line, its reason.
	QemuRefused = 5
	// Network: the VM's network could not be set up (a missing bridge,
	// privilege or kernel feature); qemu was not started.
	Network = 6
)

// Import: a disk could not be filled from its source image (vm-runner
// import), or the runner found a disk whose filling did not finish; the
// error (the termination message) names the disk and the cause. qemu was
// not started.
const Import = 7
