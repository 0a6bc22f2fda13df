// Package hostile makes hostile input for tests of the readers: YAML bombs
// and documents of hundreds of MB that are never held in memory, and
// measures what handling them allocates.
package hostile

import (
	"fmt"
	"io"
	"runtime"
	"strings"
)

// MemoryBound is what handling one hostile input may allocate in a test:
// generous for input refused early or bounded, far below what expanding a
// bomb or holding a huge document would take.
const MemoryBound = 64 << 20

// HugeSize is the size of the documents Document makes for tests.
const HugeSize = 300 << 20

// Allocated returns the bytes f allocates, an upper bound of how far the
// heap can grow while f runs.
func Allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// Document is a reader of size bytes: head, then line over and over. It
// makes its bytes as they are read, so that a test can offer hundreds of
// MB without holding them.
type Document struct {
	head, line string
	size, read int64
}

// NewDocument makes a Document.
func NewDocument(head, line string, size int64) *Document {
	return &Document{head: head, line: line, size: size}
}

func (d *Document) Read(p []byte) (int, error) {
	if d.read >= d.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), d.size-d.read)]
	n := 0
	for n < len(p) {
		var src string
		if d.read < int64(len(d.head)) {
			src = d.head[d.read:]
		} else {
			src = d.line[(d.read-int64(len(d.head)))%int64(len(d.line)):]
		}
		c := copy(p[n:], src)
		n += c
		d.read += int64(c)
	}
	return n, nil
}

// BytesRead tells how much of the document was read.
func (d *Document) BytesRead() int64 {
	return d.read
}

// Laughs is a "billion laughs" YAML mapping, each line prefixed with
// indent: a0 is a list of ten strings and each further level a list of
// ten aliases of the level below, so that a9 expands to 10^10 strings.
func Laughs(indent string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%sa0: &a0 [%s]\n", indent, strings.TrimSuffix(strings.Repeat("lol, ", 10), ", "))
	for i := 1; i <= 9; i++ {
		alias := fmt.Sprintf("*a%d", i-1)
		fmt.Fprintf(&b, "%sa%d: &a%d [%s]\n", indent, i, i, strings.TrimSuffix(strings.Repeat(alias+", ", 10), ", "))
	}
	return b.String()
}
