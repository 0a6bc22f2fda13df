package runnerexec

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ReceiveName prefixes what the receiver writes on stderr.
const ReceiveName = "vm-runner disk receive"

// progressPrefix starts a progress line.
const progressPrefix = "progress "

// ProgressLine is a progress line: "progress PHASE DONE TOTAL", the phase
// in lower case.
func ProgressLine(phase string, done, total int64) string {
	return fmt.Sprintf("%s%s %d %d", progressPrefix, strings.ToLower(phase), done, total)
}

// ParseProgress reads a ProgressLine; ok is false for any other line.
func ParseProgress(line string) (phase string, done, total int64, ok bool) {
	rest, found := strings.CutPrefix(line, progressPrefix)
	f := strings.Fields(rest)
	if !found || len(f) != 3 {
		return "", 0, 0, false
	}
	done, derr := strconv.ParseInt(f[1], 10, 64)
	total, terr := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(derr, terr); err != nil {
		return "", 0, 0, false
	}
	return f[0], done, total, true
}
