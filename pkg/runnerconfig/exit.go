package runnerconfig

// vm-runner's exit codes. A pod's status carries its container's last exit
// code, so that vm-operator and kubectl vm status tell from it why a runner
// ended without linking the runner itself.
const (
	ExitClean   = 0 // the guest shut down (by itself, or when asked)
	ExitFailed  = 1 // the runner could not start the VM
	ExitConfig  = 2 // the config file is invalid; qemu was not started
	ExitForced  = 3 // the guest did not shut down within powerdownTimeout
	ExitCrashed = 4 // qemu ended without a guest shutdown
	// ExitQemuRefused: qemu exited while starting; the runner's error (its
	// termination message in a pod) ends with qemu's last line, its reason.
	ExitQemuRefused = 5
	// ExitNetwork: the VM's network could not be set up (a missing bridge,
	// privilege or kernel feature); qemu was not started.
	ExitNetwork = 6
	// ExitImport: a disk could not be filled from its source image (vm-runner
	// import), or the runner found a disk whose filling did not finish; the
	// error (the termination message) names the disk and the cause. qemu was
	// not started.
	ExitImport = 7
	// ExitNodeAgent: vmop's node agent did not prepare the pod (it refused,
	// failed or did not answer); the error says which. qemu was not started.
	ExitNodeAgent = 8
)
