package nodeagent

import (
	"path"

	"github.com/vmop/vmop/pkg/vmpod"
)

// Container is a container that asks the agent, as vmop makes it, as far
// as it decides what runs in the container: the agent acts only for a
// container of one of these shapes (Containers), whose image is vmop's
// runner. Those parts of the container the description leaves out are
// fixed for all (see Env, Mounts, ReadinessCommand).
type Container struct {
	// Name says which container it is, in the agent's refusals.
	Name string
	// Command and Args are the container's, exactly; none: the image's
	// entrypoint (vm-runner).
	Command, Args []string
	// Scratch is whether the container may mount an emptyDir at
	// vmpod.ImportScratchDir, where it stages images. The import
	// shares it with the containerDisk fetchers, which write data there
	// (an image), never a program the import runs.
	Scratch bool
}

// Containers are the containers that ask the agent: a VM pod's runner
// and import (pkg/render), and the uploader pod's (kubectl vm disk
// upload).
var Containers = []Container{
	{Name: "runner"},
	{Name: "import", Args: []string{"import"}, Scratch: true},
	{Name: "uploader", Command: []string{"vm-runner", "disk", "wait"}, Scratch: true},
}

// ReadinessCommand and LivenessCommand are the commands a probe of such a
// container may run (the runner's readiness and liveness, as pkg/render
// sets them): any other runs with the container's devices.
var (
	ReadinessCommand = []string{"vm-runner", "probe"}
	LivenessCommand  = []string{"vm-runner", "probe", "--live"}
)

// Env is the whole environment such a container is given (PATH,
// LD_PRELOAD and the like would choose what qemu runs).
func Env() map[string]string {
	return map[string]string{EnvSocket: path.Join(Dir, Socket)}
}

// ServiceAccountDir is where Kubernetes mounts a pod's service account
// token.
const ServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// MountAllowed tells whether such a container may mount a volume at dir:
// only where vmop mounts its config and data, never over a program,
// a library or the qemu templates of the image.
func MountAllowed(dir string) bool {
	switch path.Clean(dir) {
	case Dir, vmpod.ConfigDir, vmpod.DataDir, vmpod.ImageRepositoryDir,
		vmpod.ImportScratchDir, ServiceAccountDir:
		return true
	}
	// A disk on a Filesystem claim: one directory per disk.
	return path.Dir(path.Clean(dir)) == vmpod.DiskFilesDir
}
