package node

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/testnode"
)

// diskClaim is a VM's disk on a new claim of class and mode (Block or
// Filesystem) that selects the volume labelled disk: volume, or any
// volume of the class when volume is "".
func diskClaim(name, class, mode, volume, size string) string {
	selector := ""
	if volume != "" {
		selector = fmt.Sprintf("          selector:\n            matchLabels:\n              disk: %s\n", volume)
	}
	return fmt.Sprintf(`    - volumeClaimTemplate:
        metadata:
          name: %s
        spec:
          storageClassName: %s
          volumeMode: %s
%s          resources:
            requests:
              storage: %s
`, name, class, mode, selector, size)
}

// Records a guest writes through a test: one every recordPause (after
// the write, itself slow under TCG), recordsMax at most.
const (
	recordsMax  = 2048 // 128 MiB
	recordPause = 500 * time.Millisecond
)

// recordWriter is the guest's params that make it write records to its
// records disk (withRecordsDisk) through a test.
func recordWriter() []string {
	return []string{testguest.Records(recordsMax), testguest.RecordPause(recordPause)}
}

// withRecordsDisk adds a Block volume for VM vm of namespace ns to write
// records to, and its claim to the VM's manifest; it returns the manifest
// and the volume's name.
func withRecordsDisk(t testing.TB, ns, vm, manifest string) (string, string) {
	t.Helper()
	name := ns + "-" + vm + "-records"
	require.NoError(t, node.AddBlockVolume(t.Context(), testnode.Volume{
		Name: name, Size: resource.MustParse("128Mi"), Labels: map[string]string{"disk": name},
	}))
	return strings.Replace(manifest, "    - cdrom:\n", diskClaim("records", testnode.StorageClassBlock, "Block", name, "128Mi")+"    - cdrom:\n", 1), name
}

// ackedRecords is the last record the console of the VM's guest says is
// synced, since the runner's start.
func ackedRecords(t testing.TB, ns, vm string) int {
	t.Helper()
	log, err := consoleLog(t.Context(), ns, vm)
	require.NoError(t, err)
	return testguest.AckedRecords(log)
}

var resumed = regexp.MustCompile(`(?m)^` + testguest.ResumePrefix + `([0-9]+)\r?$`)

// requireResumed waits for the guest's new boot to say where its records
// go on, and requires that it keeps every record acknowledged before:
// acked, at least. It returns where it goes on.
func requireResumed(t testing.TB, ns, vm string, acked int) int {
	t.Helper()
	line := waitConsole(t, ns, vm, testguest.ResumePrefix, 2*time.Minute)
	m := resumed.FindStringSubmatch(line)
	require.NotNil(t, m, "console line %q", line)
	next, _ := strconv.Atoi(m[1])
	require.Greater(t, next, acked, "record %d was acknowledged before the fault, and is not on the disk after it", next)
	return next
}

// requireRecordsKept waits until the guest has acknowledged a record
// after record since, and requires that the records volume holds every
// record it acknowledged; it returns the last.
func requireRecordsKept(t testing.TB, ns, vm, volume string, since int) int {
	t.Helper()
	var acked int
	eventually.Within(t, time.Minute, func() string {
		if acked = ackedRecords(t, ns, vm); acked > since {
			return ""
		}
		return fmt.Sprintf("the guest has written no record since record %d", since)
	})
	f, err := os.Open(node.DiskFile(volume))
	require.NoError(t, err)
	defer f.Close()
	lost, err := testguest.LostRecords(f, acked)
	require.NoError(t, err)
	require.Empty(t, lost, "records the guest was told are synced that are not on %s", volume)
	return acked
}
