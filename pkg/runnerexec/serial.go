package runnerexec

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"unicode"
)

// Mode is what a client asks for.
type Mode string

const (
	// ModeHistory: the kept output, then the server closes.
	ModeHistory Mode = "history"
	// ModeFollow: the kept output, then new output as it comes; the
	// client's input is ignored.
	ModeFollow Mode = "follow"
	// ModeAttach: new output as it comes, and the client's input goes to
	// the guest. One client at a time.
	ModeAttach Mode = "attach"
)

// Command is the command line of vm-runner in a VM's pod that reaches
// the serial console in mode; who names an interactive client.
func Command(mode Mode, who string) []string {
	switch mode {
	case ModeAttach:
		return []string{"vm-runner", "serial", "--attach", "--who", CleanWho(who)}
	case ModeFollow:
		// stdin ends with the client's connection, and so does the
		// follower (an exec'd process may outlive its client).
		return []string{"vm-runner", "serial", "--follow", "--until-stdin-closes"}
	default:
		// --follow=false spelt out: a runner older than the serial console
		// stops at the unknown flag, rather than taking "serial" for an
		// argument and starting a second VM.
		return []string{"vm-runner", "serial", "--follow=false"}
	}
}

// commandPrefix starts vm-runner serial's error messages.
const commandPrefix = "vm-runner serial: "

// CommandError is the error to show for what a failed vm-runner serial
// wrote: its own message, or that the runner predates it.
func CommandError(output string) error {
	output = strings.TrimSpace(strings.ReplaceAll(output, "\r", ""))
	if strings.Contains(output, "unknown flag: --") || strings.Contains(output, "unknown shorthand flag") {
		return errors.New("the VM's runner has no serial console: it runs a vm-runner older than the serial console; restart the VM to run the current runner image")
	}
	if first, _, _ := strings.Cut(output, "\n"); strings.HasPrefix(first, commandPrefix) {
		return errors.New(strings.TrimPrefix(first, commandPrefix))
	}
	return errors.New(output)
}

// maxWho bounds the name a client gives itself.
const maxWho = 128

// CleanWho makes a client's name safe to show on another's terminal: one
// line, printable, bounded.
func CleanWho(who string) string {
	who = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, who)
	who = strings.TrimSpace(who)
	if len(who) > maxWho {
		who = who[:maxWho]
	}
	if who == "" {
		return "an unnamed client"
	}
	return who
}

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
