package serialconsole

import (
	"bytes"
	"io"
)

// maxLine bounds a line of the pod log: a guest that writes without
// newlines (a progress bar, binary noise) still shows up, in pieces.
const maxLine = 4096

// lineWriter writes whole lines, each after a prefix, so that the guest's
// lines stand apart from the runner's own in the pod log, and a
// half-written line of the guest does not run into the runner's next one.
type lineWriter struct {
	w       io.Writer
	prefix  string
	partial []byte
}

func (l *lineWriter) write(b []byte) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			l.partial = append(l.partial, b...)
			for len(l.partial) >= maxLine {
				l.line(l.partial[:maxLine])
				l.partial = append(l.partial[:0], l.partial[maxLine:]...)
			}
			return
		}
		l.partial = append(l.partial, b[:i]...)
		l.line(l.partial)
		l.partial = l.partial[:0]
		b = b[i+1:]
	}
}

// flush writes a partial line, as when the copy stops.
func (l *lineWriter) flush() {
	if len(l.partial) > 0 {
		l.line(l.partial)
		l.partial = l.partial[:0]
	}
}

// line writes one line: serial lines end in CR LF, and a CR left in would
// make the pod log's line end in one.
func (l *lineWriter) line(b []byte) {
	b = bytes.TrimRight(b, "\r")
	out := make([]byte, 0, len(l.prefix)+len(b)+1)
	out = append(out, l.prefix...)
	out = append(out, b...)
	out = append(out, '\n')
	// The pod log is best effort: the guest's output is in the files too.
	_, _ = l.w.Write(out)
}
