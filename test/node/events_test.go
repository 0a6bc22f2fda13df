package node

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmop/vmop/test/harness/eventually"
)

// requireEvents waits until the real kubectl events --for obj (vm/guest
// for the VirtualMachine guest: the CRD's singular is vm) shows each of
// want, a reason or part of a message, and returns what it shows. The
// runner writes these events; the waits are the runner's and the API
// server's, not the guest's.
func requireEvents(t testing.TB, ns, obj string, want ...string) string {
	t.Helper()
	var out string
	start := time.Now()
	eventually.Within(t, time.Minute, func() string {
		var errOut string
		var err error
		out, errOut, err = kubectlResult(t.Context(), "", "events", "-n", ns, "--for", obj)
		if err != nil {
			return fmt.Sprintf("kubectl events --for %s: %v: %s", obj, err, errOut)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				return fmt.Sprintf("no %q in kubectl events --for %s:\n%s", w, obj, out)
			}
		}
		return ""
	})
	t.Logf("kubectl events --for %s showed %d expected events after %v", obj, len(want), time.Since(start).Round(time.Millisecond))
	return out
}
