package testguest

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"time"
)

// Records, on the kernel command line, makes the guest write n records of
// RecordSize bytes to each of its disks but the first (/dev/vdb, vdc...)
// from its start, record i at offset (i-1)*RecordSize, each synced to
// every disk (a flush) before the console says RecordPrefix and its
// number; RecordsDoneLine after the last.
// What the console acknowledged must be on the disk whatever happens to the
// VM: AckedRecords and LostRecords tell. A guest booted again keeps the
// records that every disk holds from the first on, and says where it goes
// on (ResumePrefix and the first record it writes): a record acknowledged
// before that boot and missing since shows there.
func Records(n int) string { return fmt.Sprintf("testguest.records=%d", n) }

// RecordPause, with Records, makes the guest wait that long after each
// record: a writer that lasts through a test.
func RecordPause(d time.Duration) string {
	return fmt.Sprintf("testguest.record_pause=%g", d.Seconds())
}

const (
	RecordSize      = 64 << 10
	RecordPrefix    = "TESTGUEST RECORD "
	ResumePrefix    = "TESTGUEST RECORDS RESUME "
	RecordsDoneLine = "TESTGUEST RECORDS DONE"
)

// Record is the content of record i: "RECORD %08d\n" over and over.
func Record(i int) []byte {
	line := fmt.Sprintf("RECORD %08d\n", i)
	return bytes.Repeat([]byte(line), RecordSize/len(line))
}

var acked = regexp.MustCompile(`(?m)^` + RecordPrefix + `([0-9]+)\r?$`)

// AckedRecords is the highest record the console says the guest synced.
func AckedRecords(console string) int {
	n := 0
	for _, m := range acked.FindAllStringSubmatch(console, -1) {
		if i, _ := strconv.Atoi(m[1]); i > n {
			n = i
		}
	}
	return n
}

// LostRecords returns the numbers of the records 1 to n that the disk does
// not hold as written.
func LostRecords(disk io.ReaderAt, n int) ([]int, error) {
	var lost []int
	buf := make([]byte, RecordSize)
	for i := 1; i <= n; i++ {
		if _, err := disk.ReadAt(buf, int64(i-1)*RecordSize); err != nil {
			return nil, fmt.Errorf("record %d: %w", i, err)
		}
		if !bytes.Equal(buf, Record(i)) {
			lost = append(lost, i)
		}
	}
	return lost, nil
}
