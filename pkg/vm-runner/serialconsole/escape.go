package serialconsole

import (
	"bytes"
	"io"
)

// Escape leaves an interactive session: Ctrl-], as in telnet and virsh
// console. It never reaches the guest.
const Escape = 0x1d

// AttachedBanner starts the line that vm-runner serial --attach prints
// once it is attached: kubectl vm console --serial tells by it that the
// attach worked, and otherwise shows what came instead (why not).
const AttachedBanner = "Attached to the serial console"

// UntilEscape reads r up to Escape, which it leaves out, and then ends
// (io.EOF), as it does at the end of r.
func UntilEscape(r io.Reader) io.Reader { return &escapeReader{r: r} }

type escapeReader struct {
	r    io.Reader
	done bool
}

func (e *escapeReader) Read(b []byte) (int, error) {
	if e.done {
		return 0, io.EOF
	}
	n, err := e.r.Read(b)
	if i := bytes.IndexByte(b[:n], Escape); i >= 0 {
		e.done = true
		if i == 0 {
			return 0, io.EOF
		}
		return i, nil
	}
	return n, err
}
