package webconsole

import (
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/cli/browser"
)

// OpenBrowser opens url in $BROWSER when set (a command, as git and gh
// take it), else in the desktop's default browser; their output goes to
// log.
func OpenBrowser(url string, log io.Writer) error {
	if b := os.Getenv("BROWSER"); b != "" {
		cmd := exec.Command(b, url)
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("$BROWSER %s: %w", b, err)
		}
		// A browser started by it may run for long; it is not waited for.
		go func() { _ = cmd.Wait() }()
		return nil
	}
	browser.Stdout, browser.Stderr = log, log
	return browser.OpenURL(url)
}
