package serialconsole

import (
	"errors"
	"strings"
)

// Command is the command line of vm-runner in a VM's pod that reaches
// the serial console in mode; who names an interactive client.
func Command(mode Mode, who string) []string {
	switch mode {
	case ModeAttach:
		return []string{"vm-runner", "serial", "--attach", "--who", cleanWho(who)}
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
