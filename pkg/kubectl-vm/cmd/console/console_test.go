package console

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConnectionFile(t *testing.T) {
	require.Equal(t, `[virt-viewer]
type=spice
host=127.0.0.1
port=5900
password=pw
title=ns/vm
delete-this-file=1
`, string(connectionFile(&endpoint{host: "127.0.0.1", port: 5900}, "pw", "ns/vm")))
	require.Equal(t, `[virt-viewer]
type=spice
host=vm.example
port=5901
password=pw
proxy=http://proxy.example:3128
title=ns/vm
delete-this-file=1
`, string(connectionFile(&endpoint{host: "vm.example", port: 5901, proxy: "http://proxy.example:3128"}, "pw", "ns/vm")))
}

func TestValidate(t *testing.T) {
	o := &Options{Expiry: 500 * time.Millisecond, Timeout: time.Minute, PrintVV: true}
	require.EqualError(t, o.Validate(), "--expiry 500ms: must be at least 1s")
	o = &Options{Expiry: time.Second, PrintVV: true}
	require.EqualError(t, o.Validate(), "--timeout 0s: must be positive")
	o = &Options{Expiry: time.Second, Timeout: time.Minute}
	t.Setenv("PATH", t.TempDir())
	require.EqualError(t, o.Validate(), "remote-viewer not found: install virt-viewer, or use --print-vv / --no-launch")
	o.NoLaunch = true
	require.NoError(t, o.Validate())
	// The browser needs no remote-viewer.
	o = &Options{Expiry: time.Second, Timeout: time.Minute, Browser: true}
	require.NoError(t, o.Validate())
	o.PrintVV = true
	require.EqualError(t, o.Validate(), "--browser: not with --print-vv: the browser needs no connection file")
	o = &Options{Serial: true, Browser: true}
	require.EqualError(t, o.Validate(), "--serial: not with --browser, --print-vv or --no-launch, which are about the display")
}
