package testguest

import (
	"fmt"
	"io"
)

// File type bits of a cpio mode, as in stat(2).
const (
	modeDir     = 0o040000
	modeRegular = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

// cpioWriter writes a "newc" (SVR4, no CRC) cpio archive, the format the
// kernel unpacks as an initramfs.
type cpioWriter struct {
	w   io.Writer
	n   int64 // bytes written, for 4-byte alignment
	ino uint32
	err error
}

func newCPIOWriter(w io.Writer) *cpioWriter { return &cpioWriter{w: w} }

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(b)
	c.n += int64(n)
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one header, its name and data. rdev is major<<8|minor for
// device nodes.
func (c *cpioWriter) entry(name string, mode uint32, rdev uint32, data []byte) {
	c.ino++
	nlink := 1
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, len(data),
		0, 0, rdev>>8, rdev&0xff, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) Dir(name string) { c.entry(name, modeDir|0o755, 0, nil) }

func (c *cpioWriter) File(name string, perm uint32, data []byte) {
	c.entry(name, modeRegular|perm, 0, data)
}

func (c *cpioWriter) Symlink(name, target string) {
	c.entry(name, modeSymlink|0o777, 0, []byte(target))
}

func (c *cpioWriter) CharDev(name string, perm, major, minor uint32) {
	c.entry(name, modeCharDev|perm, major<<8|minor, nil)
}

// Close writes the trailer; the kernel stops unpacking there.
func (c *cpioWriter) Close() error {
	c.entry("TRAILER!!!", 0, 0, nil)
	return c.err
}
