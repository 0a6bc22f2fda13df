package runner

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/test/harness/eventually"
)

// The unit tests of the live changes: the runner against fakeQemu (see
// fakeqemu_test.go), no qemu.

func TestAttachAppliesCurrentValues(t *testing.T) {
	dir := t.TempDir()
	v := newTestVM(t, baseConfig(dir))
	require.Equal(t, []string{
		"query-hotpluggable-cpus", // 2 of 2 plugged: nothing to do
		"query-hotpluggable-cpus",
		`balloon {"value":1073741824}`,
		`blockdev-open-tray {"force":false,"id":"cd0"}`,
		"query-block",
		`blockdev-change-medium {"filename":"` + filepath.Join(dir, "a.iso") + `","format":"raw","id":"cd0","read-only-mode":"read-only"}`,
	}, v.q.commands(0))
	require.Equal(t, fakeDrive{medium: filepath.Join(dir, "a.iso")}, v.q.drive("cd0"))
	require.Equal(t, fakeDrive{}, v.q.drive("cd1"))
	s := v.rec.last()
	require.Equal(t, 2, s.CPUs)
	require.False(t, s.Running)
	require.Empty(t, s.CDProblems)
	require.Empty(t, v.rec.eventsOf(""), "no events before the guest runs")
}

func TestLiveCPUs(t *testing.T) {
	c := baseConfig(t.TempDir())
	v := newTestVM(t, c)
	v.run()

	n := len(v.q.commands(0))
	c.VM.CurrentCPUs = 4
	v.reload(c)
	// The lowest free slots, named by their topology.
	require.Equal(t, []string{
		"query-hotpluggable-cpus",
		`device_add {"driver":"max-x86_64-cpu","id":"cpu-s0002-dx-c0000-t0000","socket-id":2,"core-id":0,"thread-id":0}`,
		`device_add {"driver":"max-x86_64-cpu","id":"cpu-s0003-dx-c0000-t0000","socket-id":3,"core-id":0,"thread-id":0}`,
		"query-hotpluggable-cpus",
	}, v.q.commands(n))
	require.Equal(t, 4, v.q.plugged())
	require.Equal(t, 4, v.rec.last().CPUs)
	require.Equal(t, "The guest has 4 CPUs (before: 2)", v.rec.waitEvent(t, ReasonCPUsChanged, 1).Message)

	// Unplugging asks the guest for the highest CPUs, never the first; they
	// count until the guest has let them go.
	n = len(v.q.commands(0))
	c.VM.CurrentCPUs = 1
	v.reload(c)
	require.Equal(t, []string{
		"query-hotpluggable-cpus",
		`device_del {"id":"/machine/peripheral/cpu-s0003-dx-c0000-t0000"}`,
		`device_del {"id":"/machine/peripheral/cpu-s0002-dx-c0000-t0000"}`,
		`device_del {"id":"/machine/unattached/device[1]"}`,
		"query-hotpluggable-cpus",
	}, v.q.commands(n))
	require.Equal(t, 4, v.rec.last().CPUs)
	v.q.ejectCPUs()
	v.rec.waitStatus(t, "1 CPU", func(s Status) bool { return s.CPUs == 1 })
	require.Equal(t, "The guest has 1 CPUs (before: 4)", v.rec.waitEvent(t, ReasonCPUsChanged, 2).Message)
	require.Equal(t, 1, v.q.plugged())
}

func TestLiveRAM(t *testing.T) {
	c := baseConfig(t.TempDir())
	v := newTestVM(t, c)
	v.run()
	require.Equal(t, int64(1<<30), v.rec.last().RAM, "running reads the balloon")

	n := len(v.q.commands(0))
	c.VM.CurrentRAM.Bytes = 512 << 20
	v.reload(c)
	require.Equal(t, []string{`balloon {"value":536870912}`}, v.q.commands(n))
	// The status follows the guest's balloon driver, not the target.
	require.Equal(t, int64(1<<30), v.rec.last().RAM)
	require.Empty(t, v.rec.eventsOf(ReasonRAMChanged))
	v.q.inflate()
	v.rec.waitStatus(t, "512 MiB", func(s Status) bool { return s.RAM == 512<<20 })
	require.Equal(t, "The guest's RAM is 512 MiB (balloon)", v.rec.waitEvent(t, ReasonRAMChanged, 1).Message)
}

func TestLiveCDChanges(t *testing.T) {
	dir := t.TempDir()
	c := baseConfig(dir)
	v := newTestVM(t, c)
	v.run()
	b, missing := filepath.Join(dir, "b.iso"), filepath.Join(dir, "missing.iso")

	// Another medium: the tray opens, the medium changes, the tray closes.
	n := len(v.q.commands(0))
	c.VM.Drives[1].File = b
	v.reload(c)
	// The report reload waited for may be an earlier step's, late under
	// load: wait for the change's commands.
	v.rec.wait(t, "the CD commands", func() bool { return len(v.q.commands(n)) >= 3 })
	require.Equal(t, []string{
		`blockdev-open-tray {"force":false,"id":"cd0"}`,
		"query-block",
		`blockdev-change-medium {"filename":"` + b + `","format":"raw","id":"cd0","read-only-mode":"read-only"}`,
	}, v.q.commands(n))
	require.Equal(t, fakeDrive{medium: b}, v.q.drive("cd0"))
	require.Equal(t, `CD drive cd0 (spec.vm.disks[1].cdrom.image): inserted "`+b+`"`, v.rec.waitEvent(t, ReasonMediumChanged, 1).Message)

	// No medium: eject it and close the tray. An image that cannot be
	// opened leaves its drive empty and shows in the status.
	n = len(v.q.commands(0))
	c.VM.Drives[1].File = ""
	c.VM.Drives[2].File = missing
	v.reload(c)
	v.rec.wait(t, "the CD commands", func() bool { return len(v.q.commands(n)) >= 9 })
	require.Equal(t, []string{
		`blockdev-open-tray {"force":false,"id":"cd0"}`,
		"query-block",
		`blockdev-remove-medium {"id":"cd0"}`,
		`blockdev-close-tray {"id":"cd0"}`,
		`blockdev-open-tray {"force":false,"id":"cd1"}`,
		"query-block",
		`blockdev-change-medium {"filename":"` + missing + `","format":"raw","id":"cd1","read-only-mode":"read-only"}`,
		`blockdev-remove-medium {"id":"cd1"}`,
		`blockdev-close-tray {"id":"cd1"}`,
	}, v.q.commands(n))
	require.Equal(t, fakeDrive{}, v.q.drive("cd0"))
	require.Equal(t, fakeDrive{}, v.q.drive("cd1"))
	require.Equal(t, "CD drive cd0 (spec.vm.disks[1].cdrom.image): ejected the medium", v.rec.waitEvent(t, ReasonMediumChanged, 2).Message)
	unavailable := v.rec.waitEvent(t, ReasonMediumUnavailable, 1)
	require.True(t, unavailable.Warning)
	require.Contains(t, unavailable.Message, "CD drive cd1 (spec.vm.disks[2].cdrom.image) is empty: \""+missing+"\" cannot be opened")
	require.Equal(t, []CDProblem{{Drive: "cd1", Index: 2, Image: missing,
		Err: "qmp: GenericError: Could not open '" + missing + "': No such file or directory"}}, v.rec.last().CDProblems)

	// The failed image is not tried again until the config names another.
	n = len(v.q.commands(0))
	c.VM.CurrentRAM.Bytes = 768 << 20
	v.reload(c)
	// The report reload waited for may be the last step's, late under
	// load: the balloon's is the one after it.
	v.rec.wait(t, "the balloon command", func() bool { return len(v.q.commands(n)) > 0 })
	require.Equal(t, []string{`balloon {"value":805306368}`}, v.q.commands(n))
	require.Len(t, v.rec.last().CDProblems, 1)
}

func TestLiveCDLockedTray(t *testing.T) {
	dir := t.TempDir()
	c := baseConfig(dir)
	v := newTestVM(t, c)
	v.run()
	v.q.lockTray("cd0") // the guest mounted the CD
	b := filepath.Join(dir, "b.iso")

	n := len(v.q.commands(0))
	c.VM.Drives[1].File = b
	v.reload(c)
	require.Equal(t, []string{`blockdev-open-tray {"force":false,"id":"cd0"}`, "query-block"}, v.q.commands(n))
	require.Equal(t, `CD drive cd0 (spec.vm.disks[1].cdrom.image): the change to "`+b+`" waits for the guest to release the tray (unmount or eject the CD in the guest)`,
		v.rec.waitEvent(t, ReasonWaitingForTray, 1).Message)
	require.Equal(t, []CDProblem{{Drive: "cd0", Index: 1, Image: b}}, v.rec.last().CDProblems)
	require.Equal(t, filepath.Join(dir, "a.iso"), v.q.drive("cd0").medium)

	// The guest unmounts the CD and honours the eject request.
	n = len(v.q.commands(0))
	v.q.ejectTray("cd0")
	v.rec.waitEvent(t, ReasonMediumChanged, 1)
	require.Equal(t, []string{
		`blockdev-change-medium {"filename":"` + b + `","format":"raw","id":"cd0","read-only-mode":"read-only"}`,
	}, v.q.commands(n))
	require.Equal(t, fakeDrive{medium: b}, v.q.drive("cd0"))
	require.Empty(t, v.rec.waitStatus(t, "no CD problems", func(s Status) bool { return len(s.CDProblems) == 0 }).CDProblems)
}

func TestLiveReset(t *testing.T) {
	c := baseConfig(t.TempDir())
	v := newTestVM(t, c)
	v.run()

	n := len(v.q.commands(0))
	c.ResetCounter = 1
	v.reload(c)
	require.Equal(t, []string{"system_reset"}, v.q.commands(n))

	// A lower counter does nothing; nor does a higher one while the guest
	// shuts down.
	v.q.ignoreACPI()
	c.ResetCounter = 0
	v.reload(c)
	v.sigterm()
	v.rec.waitEvent(t, ReasonShutdownRequested, 1)
	c.ResetCounter = 2
	v.reload(c)
	require.Equal(t, []string{"system_reset", "system_powerdown"}, v.q.commands(n))
}

// A change while CPUs are still being unplugged: the slots they free
// take the CPUs that the new count needs.
func TestLiveCPUsChangedDuringUnplug(t *testing.T) {
	c := baseConfig(t.TempDir())
	c.VM.Accelerator = "kvm" // under TCG, qemu would plug no CPU again
	c.VM.CurrentCPUs = 4
	v := newTestVM(t, c)
	v.run()
	c.VM.CurrentCPUs = 1
	v.reload(c)
	c.VM.CurrentCPUs = 2
	v.reload(c)
	require.Equal(t, 4, v.q.plugged(), "no free slot until the guest ejects")

	n := len(v.q.commands(0))
	v.q.ejectCPUs()
	v.rec.waitStatus(t, "2 CPUs", func(s Status) bool { return s.CPUs == 2 })
	require.Equal(t, 2, v.q.plugged())
	require.Contains(t, v.q.commands(n),
		`device_add {"driver":"max-x86_64-cpu","id":"cpu-s0001-dx-c0000-t0000","socket-id":1,"core-id":0,"thread-id":0}`)
}

// Under TCG, qemu starts at most maximumCpus vCPU threads in one run (an
// unplugged CPU's translation context is never freed; qemu aborts at a
// plug beyond them): the runner plugs no more, and says when the guest
// gets its CPUs.
func TestLiveCPUsTCGThreads(t *testing.T) {
	c := baseConfig(t.TempDir()) // 2 of 4 CPUs, tcg
	v := newTestVM(t, c)
	v.run()
	c.VM.CurrentCPUs = 3
	v.reload(c)
	v.rec.waitStatus(t, "3 CPUs", func(s Status) bool { return s.CPUs == 3 })
	c.VM.CurrentCPUs = 1
	v.reload(c)
	v.q.ejectCPUs()
	v.rec.waitStatus(t, "1 CPU", func(s Status) bool { return s.CPUs == 1 })

	// 4 threads started (2, then 1, then one for the unplugged slot that
	// a plug takes): one more plug, then none.
	n := len(v.q.commands(0))
	c.VM.CurrentCPUs = 4
	v.reload(c)
	v.rec.waitStatus(t, "2 CPUs", func(s Status) bool { return s.CPUs == 2 })
	require.Equal(t, 1, strings.Count(strings.Join(v.q.commands(n), "\n"), "device_add"))
	require.Equal(t, "The guest keeps 2 CPUs until its next start (kubectl vm restart), then gets 4: "+
		"qemu emulates it (tcg), and can start only maximumCpus (4) CPU threads in one run, an unplugged CPU's included",
		v.rec.waitEvent(t, ReasonCPUsDeferred, 1).Message)
}

// TestLiveFromTheAPIServer: a config that comes through FollowConfig (the
// runner's ConfigMap as the API server has it) is applied as a changed
// file is, and from then on an older file, which the kubelet's volume
// still shows, does not undo it.
func TestLiveFromTheAPIServer(t *testing.T) {
	c := baseConfig(t.TempDir())
	v := newTestVM(t, c)
	updates := make(chan []byte, 1)
	v.r.FollowConfig(updates)
	v.run()

	send := func(c runnerconfig.Config) {
		b, err := json.Marshal(map[string]any{"/Runner": c})
		require.NoError(t, err)
		updates <- b
	}
	newer := c
	newer.VM.CurrentCPUs = 4
	send(newer)
	require.Equal(t, "The guest has 4 CPUs (before: 2)", v.rec.waitEvent(t, ReasonCPUsChanged, 1).Message)
	require.Equal(t, 4, v.q.plugged())

	// The volume's file is still the old config: a change of it (here the
	// old config written again) must not unplug the CPUs.
	n := len(v.q.commands(0))
	v.writeConfig(c)
	newer.VM.CurrentRAM.Bytes = 512 << 20
	send(newer)
	v.rec.wait(t, "the balloon set from the API server's config", func() bool {
		return slices.Contains(v.q.commands(n), `balloon {"value":536870912}`)
	})
	for _, cmd := range v.q.commands(n) {
		require.NotContains(t, cmd, "device_del", "the older file undid the API server's config")
	}
	require.Equal(t, 4, v.q.plugged())

	// An invalid config from the API server leaves the VM as it is and
	// says where it came from.
	updates <- []byte("/Runner: {vm: {currentCpus: many}}")
	eventually.Within(t, waitTimeout, func() string {
		if !strings.Contains(v.log.String(), "ConfigMap test, config.yaml") {
			return "no error naming the ConfigMap in the log:\n" + v.log.String()
		}
		return ""
	})
	require.Equal(t, 4, v.q.plugged())

	// A config in the file that never came from the API server (its
	// updates stopped) applies.
	n = len(v.q.commands(0))
	own := newer
	own.VM.CurrentCPUs = 3
	v.writeConfig(own)
	v.rec.wait(t, "a CPU unplugged for the file's config", func() bool {
		return slices.ContainsFunc(v.q.commands(n), func(c string) bool { return strings.HasPrefix(c, "device_del") })
	})
}
