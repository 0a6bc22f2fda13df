package diskimport

import (
	"fmt"
	"io"
	"os"
)

// emptyProbe is how much of each end of a disk Empty reads.
const emptyProbe = 1 << 20

// Empty reports whether target reads as all zeros in its first and its
// last MiB, or whole when it is smaller than 2 MiB. Those are where a
// disk that holds anything has something: the partition table and boot
// sector, a file system's superblock at the start, GPT's backup header at
// the end. Reading them is enough to never overwrite a used disk without
// reading a terabyte.
func Empty(target string) (bool, error) {
	f, err := os.Open(target)
	if err != nil {
		return false, err
	}
	defer f.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, fmt.Errorf("size of %s: %w", target, err)
	}
	buf := make([]byte, emptyProbe)
	ranges := [][2]int64{{0, min(size, emptyProbe)}}
	if size > 2*emptyProbe {
		ranges = append(ranges, [2]int64{size - emptyProbe, size})
	} else if size > emptyProbe {
		ranges = append(ranges, [2]int64{emptyProbe, size})
	}
	for _, r := range ranges {
		b := buf[:r[1]-r[0]]
		if _, err := f.ReadAt(b, r[0]); err != nil {
			return false, fmt.Errorf("read %s: %w", target, err)
		}
		for _, c := range b {
			if c != 0 {
				return false, nil
			}
		}
	}
	return true, nil
}
