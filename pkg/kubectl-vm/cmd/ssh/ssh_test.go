package ssh

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

func TestParseArgs(t *testing.T) {
	for _, c := range []struct {
		name             string
		args             []string
		dash             int
		login            string
		user, vm, errMsg string
		command          []string
	}{
		{name: "name", args: []string{"vm"}, dash: -1, vm: "vm"},
		{name: "user@name", args: []string{"debian@vm"}, dash: -1, user: "debian", vm: "vm"},
		{name: "-l", args: []string{"vm"}, dash: -1, login: "root", user: "root", vm: "vm"},
		{name: "-l and the same user@", args: []string{"root@vm"}, dash: -1, login: "root", user: "root", vm: "vm"},
		{name: "command", args: []string{"vm", "uname", "-a"}, dash: 1, vm: "vm", command: []string{"uname", "-a"}},
		{name: "nothing", dash: -1, errMsg: "a VM is required: [USER@]NAME"},
		{name: "only a command", args: []string{"ls"}, dash: 0, errMsg: "a VM is required: [USER@]NAME"},
		{name: "command without --", args: []string{"vm", "ls"}, dash: -1, errMsg: `one VM only: "vm ls"; a command to run in the guest goes after --`},
		{name: "-- without command", args: []string{"vm"}, dash: 1, errMsg: "no command after --"},
		{name: "empty user", args: []string{"@vm"}, dash: -1, errMsg: `"@vm": the user before @ is empty`},
		{name: "empty name", args: []string{"debian@"}, dash: -1, errMsg: `"debian@": the VM name is empty`},
		{name: "two users", args: []string{"debian@vm"}, dash: -1, login: "root", errMsg: `"debian@vm" and -l root: two users`},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &Options{User: c.login}
			err := o.parseArgs(c.args, c.dash)
			if c.errMsg != "" {
				require.EqualError(t, err, c.errMsg)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.user, o.User)
			require.Equal(t, c.vm, o.Name)
			require.Equal(t, c.command, o.Command)
		})
	}
}

// TestKubeFlags: the kubectl flags given reach the ProxyCommand, as the
// root command parsed them; the namespace goes as the one resolved.
func TestKubeFlags(t *testing.T) {
	root := &cobra.Command{Use: "vm"}
	genericclioptions.NewConfigFlags(true).AddFlags(root.PersistentFlags())
	var got []string
	root.AddCommand(&cobra.Command{Use: "ssh", Run: func(cmd *cobra.Command, _ []string) { got = kubeFlags(cmd.InheritedFlags()) }})
	root.SetArgs([]string{"--context", "prod", "ssh", "-n", "x", "--as", "jane", "--as-group", "a", "--as-group", "b", "--kubeconfig=/k"})
	require.NoError(t, root.Execute())
	require.Equal(t, []string{"--as=jane", "--as-group=a", "--as-group=b", "--context=prod", "--kubeconfig=/k"}, got)
}

func TestValidatePort(t *testing.T) {
	require.NoError(t, (&Options{Port: "2222"}).Validate())
	require.EqualError(t, (&Options{Port: "ssh"}).Validate(), `--port "ssh": must be a number from 1 to 65535`)
	require.EqualError(t, (&Options{Port: "0"}).Validate(), `--port "0": must be a number from 1 to 65535`)
}

func TestSSHArgs(t *testing.T) {
	o := &Options{
		Name: "test-vm", User: "debian", Port: "2222", Identity: "/home/me/.ssh/id_ed25519",
		SSHOptions: []string{"StrictHostKeyChecking=accept-new", "ConnectTimeout=30"},
		Command:    []string{"uname", "-a"},
		self:       "/usr/local/bin/kubectl-vm", namespace: "prod",
		kubeFlags: []string{"--kubeconfig=/home/me/my configs/kube%1", "--context=it's-prod"},
	}
	require.Equal(t, []string{
		"-o", `ProxyCommand=/usr/local/bin/kubectl-vm port-forward --stdio 2222 test-vm -n prod '--kubeconfig=/home/me/my configs/kube%%1' '--context=it'\''s-prod'`,
		"-o", "HostKeyAlias=vm.test-vm.prod",
		"-i", "/home/me/.ssh/id_ed25519",
		"-l", "debian",
		"-o", "StrictHostKeyChecking=accept-new",
		"-o", "ConnectTimeout=30",
		"--", "vm.test-vm.prod", "uname", "-a",
	}, o.sshArgs())

	o = &Options{Name: "vm", Port: "22", self: "/bin/kubectl-vm", namespace: "default"}
	require.Equal(t, []string{"-o", "ProxyCommand=/bin/kubectl-vm port-forward --stdio 22 vm -n default",
		"-o", "HostKeyAlias=vm.vm.default", "--", "vm.vm.default"}, o.sshArgs())
}
