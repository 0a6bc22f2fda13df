package diskimport

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// emptyProbe is how much of each end of a block device Empty reads.
const emptyProbe = 1 << 20

// Seek's whence values for the next data and the next hole of a sparse
// file (lseek(2)); a file system without holes has data up to the end.
const (
	seekData = 3
	seekHole = 4
)

// Empty reports whether target holds nothing but zeros. A regular file
// (a disk on a Filesystem claim) is read whole where it has data, which
// for a sparse file is only what was written. A block device is read in
// its first and its last MiB (whole when smaller than 2 MiB): those are
// where a disk that holds anything has something (the partition table
// and boot sector, a file system's superblock at the start, GPT's backup
// header at the end), and reading them is enough to never overwrite a
// used disk without reading a terabyte.
func Empty(target string) (bool, error) {
	f, err := os.Open(target)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Mode().IsRegular() {
		return dataZero(f, fi.Size())
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, fmt.Errorf("size of %s: %w", target, err)
	}
	return endsZero(f, size)
}

// endsZero reports whether f's first and last MiB read as zeros.
func endsZero(f *os.File, size int64) (bool, error) {
	ranges := [][2]int64{{0, min(size, emptyProbe)}}
	if size > 2*emptyProbe {
		ranges = append(ranges, [2]int64{size - emptyProbe, size})
	} else if size > emptyProbe {
		ranges = append(ranges, [2]int64{emptyProbe, size})
	}
	for _, r := range ranges {
		if zero, err := rangeZero(f, r[0], r[1]); err != nil || !zero {
			return false, err
		}
	}
	return true, nil
}

// dataZero reports whether every data extent of the file f reads as
// zeros: holes need no reading.
func dataZero(f *os.File, size int64) (bool, error) {
	for off := int64(0); off < size; {
		start, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			return true, nil // no data after off
		}
		if err != nil {
			return false, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		end, err := f.Seek(start, seekHole)
		if err != nil {
			return false, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		if zero, err := rangeZero(f, start, end); err != nil || !zero {
			return false, err
		}
		off = end
	}
	return true, nil
}

// rangeZero reports whether f's bytes from start to end are zeros.
func rangeZero(f *os.File, start, end int64) (bool, error) {
	buf := make([]byte, min(end-start, emptyProbe))
	for off := start; off < end; {
		b := buf[:min(end-off, int64(len(buf)))]
		if _, err := f.ReadAt(b, off); err != nil {
			return false, fmt.Errorf("read %s: %w", f.Name(), err)
		}
		for _, c := range b {
			if c != 0 {
				return false, nil
			}
		}
		off += int64(len(b))
	}
	return true, nil
}
