package console_test

import (
	"context"
	"errors"
	"image"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/console"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/xscreen"
)

// testViewer launches remote-viewer through the command, as a user would,
// on a virtual X screen, waits until it shows the VM's display and saves
// a screenshot (kept with go test -artifacts).
func (e *env) testViewer(t *testing.T, name string) {
	prereq.Commands(t, "virt-viewer", console.Viewer)
	display := xscreen.Start(t)
	for _, kv := range xscreen.Env(display) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	var stderr string
	go func() {
		var err error
		_, stderr, err = e.plugin(ctx, "console", name)
		done <- err
	}()
	// The viewer has logged in once it has a display channel; then its
	// window shows the guest's screen.
	var img *image.RGBA
	eventually.Succeeds(t, 60*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the command ended while the viewer should run: %v\nstderr: %s", err, stderr)
		default:
		}
		info, err := e.qemu.QuerySpice(ctx)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(info.Channels, func(c qmp.SpiceChannel) bool { return c.ChannelType == qmp.SpiceChannelDisplay }) {
			return errors.New("no SPICE display channel connected")
		}
		if img, err = xscreen.Shot(display); err != nil {
			return err
		}
		return xscreen.ShowsGuest(img)
	})
	xscreen.Save(t, img, "remote-viewer.png")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "stderr: %s", stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end with its viewer")
	}
}
