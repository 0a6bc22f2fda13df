package status

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/runnerconfig"
)

// TestDisplayWithoutPassword: a display that runs without a password says
// so loudly, with how to lock it; a locked one says how to get in.
func TestDisplayWithoutPassword(t *testing.T) {
	o := &Options{cmdName: "kubectl vm"}
	view := func(open bool) *View {
		return &View{VM: &vmclient.VM{Name: "desk", Mode: vmclient.ModeGitOps}, Config: &runnerconfig.Config{VM: runnerconfig.VM{
			Display: &runnerconfig.Display{Spice: &runnerconfig.Spice{Port: 5900, WithoutPassword: open}},
		}}}
	}
	require.Equal(t, "SPICE on port 5900, locked but for one-time passwords (kubectl vm console desk) and Secret desk-display-secret", o.display(view(false)))
	require.Equal(t, "SPICE on port 5900 WITHOUT A PASSWORD: metadata.annotations[vmoperator.jdrupes.org/display-without-password]: "+
		"the SPICE display has no password: whoever reaches the pod's SPICE port gets the screen, keyboard and USB redirection; remove the annotation to lock it",
		o.display(view(true)))
}
