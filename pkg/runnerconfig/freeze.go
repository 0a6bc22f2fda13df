package runnerconfig

// Exit codes of vm-runner freeze and thaw besides 0 (done) and ExitConfig
// (a usage error: also what a runner older than the commands answers).
const (
	// ExitFreezeFailed: the runner did not freeze (or thaw) the guest's
	// file systems; stderr says why.
	ExitFreezeFailed = 1
	// ExitNoGuestAgent: no guest agent answers: the guest cannot be
	// frozen, and a snapshot now is crash-consistent.
	ExitNoGuestAgent = 3
)
