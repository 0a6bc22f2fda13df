package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/vm-runner/reporter"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/argocd"
)

// TestArgoCDHealth drives VMs through the states the operator reports and
// checks that the Argo CD health check says of each live object what
// health_test.yaml expects. With VMOP_UPDATE_FIXTURES=1 it writes the
// objects to pkg/argocd/testdata, where test/harness/argocd's test checks
// the script against them without a cluster.
func TestArgoCDHealth(t *testing.T) {
	// argoCDDir holds the health check, its health_test.yaml (the expected
	// health of each case) and the fixtures this test takes from the cluster.
	argoCDDir, err := argocd.Dir()
	require.NoError(t, err)
	cases, err := argocd.ReadTestCases(filepath.Join(argoCDDir, "health_test.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, cases, "health_test.yaml lists no case")
	want := map[string]argocd.Status{}
	for _, c := range cases {
		want[c.InputPath] = c.HealthStatus
	}
	seen := map[string]bool{}
	e := newEnv(t)
	op := e.startOperator("vm-operator", "--resync=2s")
	ns := e.namespace("argocd", nil)
	// check asserts the health of the VM and records it as the fixture of
	// the case.
	check := func(t *testing.T, ns, name, fixture string) {
		t.Helper()
		vm := e.getVM(ns, name)
		got, err := argocd.Health(vm.Object)
		require.NoError(t, err)
		path := "testdata/" + fixture + ".yaml"
		seen[path] = true
		if os.Getenv("VMOP_UPDATE_FIXTURES") == "1" {
			vm.SetManagedFields(nil)
			b, err := yaml.Marshal(vm.Object)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(argoCDDir, path), b, 0o644))
		}
		exp, ok := want[path]
		require.True(t, ok, "health_test.yaml has no case %s; the health is %+v", path, got)
		require.Equal(t, exp, got, "%s/%s", ns, name)
	}
	running := func(st v1.VirtualMachineStatus) bool {
		return condition(st, v1.ConditionRunning).Reason == v1.ReasonRunning &&
			condition(st, v1.ConditionReady).Status == metav1.ConditionTrue
	}

	t.Run("stopped as asked", func(t *testing.T) {
		e.createVM(ns, strings.Replace(fmt.Sprintf(runningVM, "stopped"), "state: Running", "state: Stopped", 1))
		e.waitStatus(ns, "stopped", 30*time.Second, "stopped", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Reason == v1.ReasonStopped
		})
		check(t, ns, "stopped", "stopped")
	})

	t.Run("running as asked, then a restart required", func(t *testing.T) {
		e.createVM(ns, fmt.Sprintf(runningVM, "running"))
		e.waitStatus(ns, "running", 60*time.Second, "running and ready", running)
		check(t, ns, "running", "running")
		e.patchVM(ns, "running", `{"maximumRam":"4Gi"}`)
		e.waitStatus(ns, "running", 30*time.Second, "restart required", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRestartRequired).Status == metav1.ConditionTrue
		})
		check(t, ns, "running", "restart-required")
	})

	// No kubelet (nor kwok) serves this node: the pod stays Pending, and
	// once deleted it stays terminating, as a VM's pod does while its
	// guest shuts down.
	t.Run("starting, then stopping", func(t *testing.T) {
		const absent = "node-without-kubelet"
		e.createVM(ns, strings.Replace(fmt.Sprintf(runningVM, "pending"), "nodeName: "+node, "nodeName: "+absent, 1))
		e.waitStatus(ns, "pending", 60*time.Second, "starting with a pod", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionRunning).Reason == v1.ReasonStarting && st.Node == absent
		})
		check(t, ns, "pending", "starting")
		e.patchVM(ns, "pending", `{"state":"Stopped"}`)
		// Stopping is also the phase of a pod not yet deleted: wait for the
		// deletion to be seen.
		e.waitStatus(ns, "pending", 60*time.Second, "stopping", func(st v1.VirtualMachineStatus) bool {
			c := condition(st, v1.ConditionRunning)
			return c.Reason == v1.ReasonStopping && strings.Contains(c.Message, "shutting down")
		})
		check(t, ns, "pending", "stopping")
	})

	t.Run("a pod that cannot be created", func(t *testing.T) {
		// Pod Security "baseline" forbids the privileged runner on the
		// host's network that a tap NIC needs.
		ns := e.namespace("argocd-baseline", map[string]string{"pod-security.kubernetes.io/enforce": "baseline"})
		e.createVM(ns, tapVM(t, "forbidden"))
		st := e.waitStatus(ns, "forbidden", 60*time.Second, "PodCreateFailed", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionFailed).Reason == v1.ReasonPodCreateFailed
		})
		require.Contains(t, condition(st, v1.ConditionFailed).Message, `violates PodSecurity "baseline:latest"`)
		check(t, ns, "forbidden", "pod-create-failed")
	})

	t.Run("an object the API server refuses", func(t *testing.T) {
		ns := e.namespace("argocd-denied", nil)
		e.denyConfigMaps(t, ns)
		e.createVM(ns, fmt.Sprintf(runningVM, "denied"))
		e.waitStatus(ns, "denied", 60*time.Second, "ApplyFailed", func(st v1.VirtualMachineStatus) bool {
			return condition(st, v1.ConditionFailed).Reason == v1.ReasonApplyFailed
		})
		check(t, ns, "denied", "apply-failed")
		e.allowConfigMaps(t)
	})

	// No runner runs under kwok: its status reporter writes what a runner
	// writes when qemu cannot open a CD image or the guest holds the tray.
	t.Run("a CD drive without its medium", func(t *testing.T) {
		e.createVM(ns, strings.Replace(fmt.Sprintf(runningVM, "media"), `cdrom: {image: ""}`, "cdrom: {image: installer.iso}", 1))
		e.waitStatus(ns, "media", 60*time.Second, "running and ready", running)
		rep, err := reporter.New(e.c.APIConfig, ns, "media", nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = rep.Stop(context.Background()) })
		image := filepath.Join(vmpod.ImageRepositoryDir, "installer.iso")
		for _, c := range []struct {
			fixture, reason string
			problem         runner.CDProblem
		}{
			{"medium-unavailable", reporter.ReasonMediumFailed, runner.CDProblem{Drive: "cd0", Index: 1, Image: image,
				Err: fmt.Sprintf("Could not open '%s': No such file or directory", image)}},
			{"medium-waits-for-tray", reporter.ReasonMediumWaitsTray, runner.CDProblem{Drive: "cd0", Index: 1, Image: image}},
		} {
			rep.Report(t.Context(), runner.Status{Running: true, CPUs: 2, RAM: 1 << 30, CDProblems: []runner.CDProblem{c.problem}})
			e.waitStatus(ns, "media", 30*time.Second, c.reason, func(st v1.VirtualMachineStatus) bool {
				return condition(st, v1.ConditionMediaLoaded).Reason == c.reason
			})
			check(t, ns, "media", c.fixture)
		}
	})

	t.Run("without the operator", func(t *testing.T) {
		op.terminate(t)
		e.patchVM(ns, "stopped", `{"currentCpus":3}`)
		check(t, ns, "stopped", "generation-behind")
		e.createVM(ns, fmt.Sprintf(runningVM, "unobserved"))
		check(t, ns, "unobserved", "no-status")
	})

	for _, c := range cases {
		require.True(t, seen[c.InputPath], "health_test.yaml: no e2e case makes %s", c.InputPath)
	}
}
