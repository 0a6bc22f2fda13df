package portforward

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParsePort(t *testing.T) {
	for _, c := range []struct {
		arg  string
		want Port
		err  string
	}{
		{arg: "8080:80", want: Port{Local: 8080, Guest: 80}},
		{arg: "22", want: Port{Local: 22, Guest: 22}},
		{arg: ":22", want: Port{Guest: 22}},
		{arg: "0:22", want: Port{Guest: 22}},
		{arg: "65535:1", want: Port{Local: 65535, Guest: 1}},
		{arg: "", err: `port "": guest port "": must be a number from 1 to 65535`},
		{arg: "ssh", err: `port "ssh": guest port "ssh": must be a number from 1 to 65535`},
		{arg: "0", err: `port "0": guest port "0": must be a number from 1 to 65535`},
		{arg: "8080:", err: `port "8080:": guest port "": must be a number from 1 to 65535`},
		{arg: "8080:0", err: `port "8080:0": guest port "0": must be a number from 1 to 65535`},
		{arg: "70000:22", err: `port "70000:22": local port "70000": must be a number from 0 to 65535`},
		{arg: "-1:22", err: `port "-1:22": local port "-1": must be a number from 0 to 65535`},
		{arg: "1:2:3", err: `port "1:2:3": guest port "2:3": must be a number from 1 to 65535`},
		{arg: "22\n", err: `port "22\n": guest port "22\n": must be a number from 1 to 65535`},
	} {
		t.Run(c.arg, func(t *testing.T) {
			p, err := ParsePort(c.arg)
			if c.err != "" {
				require.EqualError(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, p)
		})
	}
}

func TestArgs(t *testing.T) {
	for _, c := range []struct {
		name  string
		stdio string // "-" for not given
		args  []string
		want  parsed
		err   string
	}{
		{name: "ports", stdio: "-", args: []string{"vm", "8080:80", ":22"},
			want: parsed{Name: "vm", Ports: []Port{{8080, 80}, {0, 22}}}},
		{name: "stdio", stdio: "22", args: []string{"vm"}, want: parsed{Name: "vm", Stdio: 22}},
		{name: "no name", stdio: "-", err: "a VM name is required"},
		{name: "no port", stdio: "-", args: []string{"vm"}, err: "at least one port is required: [LOCAL:]GUEST"},
		{name: "every bad port", stdio: "-", args: []string{"vm", "x", "80", "1:y"},
			err: "port \"x\": guest port \"x\": must be a number from 1 to 65535\nport \"1:y\": guest port \"y\": must be a number from 1 to 65535"},
		{name: "stdio with ports", stdio: "22", args: []string{"vm", "80"}, err: `--stdio 22: takes no port arguments, got "80"`},
		{name: "bad stdio", stdio: "0", args: []string{"vm"}, err: `--stdio "0": must be a number from 1 to 65535`},
		{name: "empty stdio", stdio: "", args: []string{"vm"}, err: `--stdio "": must be a number from 1 to 65535`},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &Options{stdio: c.stdio}
			err := o.parseArgs(c.stdio != "-", c.args)
			if c.err != "" {
				require.EqualError(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want.Name, o.Name)
			require.Equal(t, c.want.Ports, o.Ports)
			require.Equal(t, c.want.Stdio, o.Stdio)
		})
	}
}

// parsed is what parseArgs sets.
type parsed struct {
	Name  string
	Ports []Port
	Stdio int
}

func TestValidateAddresses(t *testing.T) {
	o := &Options{Addresses: []string{"localhost", "::1", "0.0.0.0"}, Ports: []Port{{0, 22}}}
	require.NoError(t, o.Validate())
	require.Equal(t, []string{"127.0.0.1", "::1", "0.0.0.0"}, o.Addresses)
	o = &Options{Addresses: []string{"127.0.0.1", "example.com"}, Ports: []Port{{0, 22}}}
	require.EqualError(t, o.Validate(), `--address "example.com": not an IP address`)
	o = &Options{Ports: []Port{{0, 22}}}
	require.EqualError(t, o.Validate(), "--address: at least one address is required")
}

func TestRunnerSaid(t *testing.T) {
	require.Equal(t, "guest port 8: refused", runnerSaid("vm-runner connect: guest port 8: refused\n"))
	require.Equal(t, "something else", runnerSaid("noise\nsomething else\n"))
	require.Equal(t, "", runnerSaid(""))
}
