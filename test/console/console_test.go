// Package console tests "kubectl vm console" end to end: a real API
// server, a real vm-runner with qemu and a tiny guest, the runner's status
// reporter, and SPICE logins with the password the command hands out.
// Nothing plays the kubelet but the test itself, which copies the display
// Secret into the runner's config directory. Without a kubelet a pod has
// no ports and no exec, so the port-forward path and the password handed
// over through the pod are not tested here (test/node does): the VM is
// reached through its LoadBalancer Service, whose address the test sets,
// and the command falls back to writing the display Secret.
package console_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/console"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vm-runner/qmp"
	"github.com/vmop/vmop/pkg/vm-runner/reporter"
	"github.com/vmop/vmop/pkg/vm-runner/runner"
	"github.com/vmop/vmop/pkg/vm-runner/runner/templates"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/freeport"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/spicetest"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/testguest"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// TestMain builds vm-runner-template, which the runners run, once.
func TestMain(m *testing.M) {
	os.Exit(vmopbin.Main(m))
}

const ns = "console"

// vmManifest is a VM with SPICE on port %[2]d behind a LoadBalancer
// Service; the runner stops qemu soon after the test ends.
const vmManifest = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: %[1]s
  namespace: console
spec:
  loadBalancerService: {}
  vm:
    state: Running
    firmware: bios
    powerdownTimeout: 1
    maximumCpus: 1
    maximumRam: 512Mi
    display:
      spice:
        port: %[2]d
`

type env struct {
	t       *testing.T
	c       *testcluster.Cluster
	kube    kubernetes.Interface
	dynamic dynamic.Interface
	// qemu is a second QMP monitor of the VM's qemu, for the test.
	qemu *qmp.Monitor
}

func newEnv(t *testing.T) *env {
	prereq.Commands(t, "qemu-system-x86, swtpm", "qemu-system-x86_64", "swtpm")
	c := testcluster.New(t)
	ctx := t.Context()
	require.NoError(t, c.InstallCRD(ctx, v1.CRDManifest))
	require.NoError(t, c.CreateNamespace(ctx, ns))
	e := &env{t: t, c: c}
	var err error
	e.kube, err = kubernetes.NewForConfig(c.Config)
	require.NoError(t, err)
	e.dynamic, err = dynamic.NewForConfig(c.Config)
	require.NoError(t, err)
	return e
}

// plugin runs "kubectl vm" in this process against the cluster.
func (e *env) plugin(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	r := plugintest.Run(ctx, "", append([]string{"--kubeconfig", e.c.Kubeconfig, "-n", ns}, args...)...)
	return r.Stdout, r.Stderr, r.Err
}

// createVM creates the VirtualMachine of manifest and returns it decoded.
func (e *env) createVM(manifest string) *v1.VirtualMachine {
	obj := &unstructured.Unstructured{}
	require.NoError(e.t, yaml.Unmarshal([]byte(manifest), &obj.Object))
	_, err := e.dynamic.Resource(v1.GroupVersionResource).Namespace(ns).Create(e.t.Context(), obj, metav1.CreateOptions{})
	require.NoError(e.t, err)
	js, err := obj.MarshalJSON()
	require.NoError(e.t, err)
	vm, err := v1.DecodeJSON(js)
	require.NoError(e.t, err)
	return vm
}

// passwordSerial is the VM's status.displayPasswordSerial.
func (e *env) passwordSerial(t *testing.T, name string) int64 {
	obj, err := e.dynamic.Resource(v1.GroupVersionResource).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	n, _, _ := unstructured.NestedInt64(obj.Object, "status", "displayPasswordSerial")
	return n
}

// runPod creates the VM's pod and sets it Running, as the kubelet would.
func (e *env) runPod(name string) {
	ctx := e.t.Context()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-0", Namespace: ns, Labels: render.SelectorLabels(name)},
		Spec: corev1.PodSpec{
			NodeName:                     "node-1",
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: render.ContainerRunner, Image: "vm-runner"}},
		},
	}
	pod, err := e.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(e.t, err)
	pod.Status.Phase = corev1.PodRunning
	_, err = e.kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// exposeService creates the VM's Service as render makes it and gives it
// the address a load balancer would.
func (e *env) exposeService(objs *render.Objects) {
	ctx := e.t.Context()
	svc, err := e.kube.CoreV1().Services(ns).Create(ctx, objs.Service, metav1.CreateOptions{})
	require.NoError(e.t, err)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "127.0.0.1"}}
	_, err = e.kube.CoreV1().Services(ns).UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	require.NoError(e.t, err)
}

// createDisplaySecret makes the Secret that the operator makes for a VM
// that is to run: a password that has expired, so the display is locked.
func (e *env) createDisplaySecret(name string) {
	lbl := render.DisplaySecretLabels(name)
	_, err := e.kube.CoreV1().Secrets(ns).Create(e.t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: render.DisplaySecretName(name), Namespace: ns, Labels: lbl},
		StringData: map[string]string{vmpod.DisplayPasswordFile: "initial", vmpod.PasswordExpiryFile: "now"},
	}, metav1.CreateOptions{})
	require.NoError(e.t, err)
}

// syncSecret does the kubelet's part for the display Secret: it copies
// its files into dir now and whenever the Secret changes, until the test
// ends. Files are replaced by a rename, as the kubelet swaps them.
func (e *env) syncSecret(name, dir string) {
	ctx := e.t.Context()
	secrets := e.kube.CoreV1().Secrets(ns)
	copyFiles := func(s *corev1.Secret) {
		for _, key := range []string{vmpod.DisplayPasswordFile, vmpod.PasswordExpiryFile} {
			tmp := filepath.Join(dir, "."+key+".tmp")
			require.NoError(e.t, os.WriteFile(tmp, s.Data[key], 0o600))
			require.NoError(e.t, os.Rename(tmp, filepath.Join(dir, key)))
		}
	}
	s, err := secrets.Get(ctx, render.DisplaySecretName(name), metav1.GetOptions{})
	require.NoError(e.t, err)
	copyFiles(s)
	go func() {
		seen := s.ResourceVersion
		for ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			s, err := secrets.Get(ctx, s.Name, metav1.GetOptions{})
			if err == nil && s.ResourceVersion != seen {
				copyFiles(s)
				seen = s.ResourceVersion
			}
		}
	}()
}

// startRunner runs vm-runner's logic in this process with the config that
// render makes of vm, the tiny test guest under TCG and a reporter to the
// VirtualMachine's status, and waits until the runner has applied the
// display password it started with. The runner ends with the test.
func (e *env) startRunner(vm *v1.VirtualMachine, objs *render.Objects) {
	t := e.t
	// Unix socket paths are short: keep the directory near the root.
	dir, err := os.MkdirTemp("", "vmc")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	etc, tmplDir := filepath.Join(dir, "etc"), filepath.Join(dir, "templates")
	require.NoError(t, os.MkdirAll(etc, 0o755))
	require.NoError(t, os.MkdirAll(tmplDir, 0o755))

	f, err := runnerconfig.Decode([]byte(objs.ConfigMap.Data[vmpod.ConfigFile]))
	require.NoError(t, err)
	f.Runner.DataDir, f.Runner.RuntimeDir = filepath.Join(dir, "data"), filepath.Join(dir, "run")
	f.Runner.VM.Accelerator = "tcg"
	cfg, err := manifest.Marshal(f)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(etc, vmpod.ConfigFile), cfg, 0o644))
	std, _, err := templates.Read(templates.Standard)
	require.NoError(t, err)
	args := testguest.Build(t).QemuArgs()
	extra := "-qmp unix:{{opt .RuntimeDir}}/test.sock,server=on,wait=off\n"
	for i := 0; i+1 < len(args); i += 2 {
		extra += args[i] + " " + args[i+1] + "\n"
	}
	require.NoError(t, os.WriteFile(filepath.Join(tmplDir, templates.Standard), append(std, "\n"+extra...), 0o644))
	e.syncSecret(vm.Name, etc)

	logFile, err := os.Create(filepath.Join(dir, "runner.log"))
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reporter, err := reporter.New(e.c.APIConfig, ns, vm.Name, log)
	require.NoError(t, err)
	r, err := runner.New(runner.Options{
		ConfigFile:     filepath.Join(etc, vmpod.ConfigFile),
		TemplateDirs:   []string{tmplDir},
		Logger:         log,
		Reporter:       reporter,
		QemuOutput:     logFile,
		TemplateHelper: vmopbin.Build(t, runner.TemplateHelper),
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			t.Logf("the runner ended: %v", err)
		case <-time.After(30 * time.Second):
			t.Error("the runner did not end")
		}
		require.NoError(t, reporter.Stop(context.Background()))
		if t.Failed() {
			b, _ := os.ReadFile(logFile.Name())
			t.Logf("runner log:\n%s", b)
		}
		logFile.Close()
	})
	eventually.Succeeds(t, 60*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("the runner ended: %v", err)
		default:
		}
		if e.passwordSerial(t, vm.Name) < 1 {
			return fmt.Errorf("no status.displayPasswordSerial yet")
		}
		return nil
	})
	e.qemu, err = qmp.Dial(t.Context(), filepath.Join(f.Runner.RuntimeDir, "test.sock"))
	require.NoError(t, err)
	t.Cleanup(func() { e.qemu.Close() })
}

// vvKey returns the value of key in a .vv file.
func vvKey(t *testing.T, vv, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + key + `=(.*)$`).FindStringSubmatch(vv)
	require.NotNil(t, m, "no %s= in\n%s", key, vv)
	return m[1]
}

func TestConsole(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	port := freeport.Get(t)
	vm := e.createVM(fmt.Sprintf(vmManifest, "test-vm", port))
	objs, err := render.Render(vm, render.Options{})
	require.NoError(t, err)
	e.exposeService(objs)
	e.createDisplaySecret(vm.Name)
	e.runPod(vm.Name)
	e.startRunner(vm, objs)
	spice := fmt.Sprintf("127.0.0.1:%d", port)
	ok, err := spicetest.Login(ctx, spice, "initial")
	require.NoError(t, err)
	require.False(t, ok, "the operator's password has expired: the display is locked")

	t.Run("print-vv through the LoadBalancer", func(t *testing.T) {
		before := e.passwordSerial(t, vm.Name)
		out, errOut, err := e.plugin(ctx, "console", vm.Name, "--print-vv", "--expiry", "3s")
		require.NoError(t, err, "stderr: %s", errOut)
		require.Contains(t, errOut, "cannot hand the password to test-vm's runner through its pod")
		require.Contains(t, errOut, "setting it through the display Secret")
		t.Logf(".vv:\n%s", out)
		require.True(t, strings.HasPrefix(out, "[virt-viewer]\ntype=spice\n"), out)
		require.Equal(t, "127.0.0.1", vvKey(t, out, "host"))
		require.Equal(t, fmt.Sprint(port), vvKey(t, out, "port"))
		require.Equal(t, ns+"/"+vm.Name, vvKey(t, out, "title"))
		require.Equal(t, "1", vvKey(t, out, "delete-this-file"))
		require.NotContains(t, out, "proxy=")
		password := vvKey(t, out, "password")
		require.Greater(t, e.passwordSerial(t, vm.Name), before, "the command waited for the runner")
		s, err := e.kube.CoreV1().Secrets(ns).Get(ctx, render.DisplaySecretName(vm.Name), metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, password, string(s.Data[vmpod.DisplayPasswordFile]))
		require.Equal(t, "+3", string(s.Data[vmpod.PasswordExpiryFile]))

		ok, err := spicetest.Login(ctx, spice, password)
		require.NoError(t, err)
		require.True(t, ok, "the one-time password logs in")
		ok, err = spicetest.Login(ctx, spice, "initial")
		require.NoError(t, err)
		require.False(t, ok)
		eventually.Succeeds(t, 10*time.Second, func() error {
			ok, err := spicetest.Login(ctx, spice, password)
			if err == nil && ok {
				err = fmt.Errorf("the password still logs in")
			}
			return err
		})
	})

	t.Run("remote-viewer", func(t *testing.T) { e.testViewer(t, vm.Name) })

	t.Run("server and proxyUrl", func(t *testing.T) {
		// Without the Service, VM-Operator's fields name the way.
		require.NoError(t, e.kube.CoreV1().Services(ns).Delete(ctx, vm.Name, metav1.DeleteOptions{}))
		patch := `{"spec":{"vm":{"display":{"spice":{"server":"localhost","proxyUrl":"http://proxy.example:3128"}}}}}`
		_, err := e.dynamic.Resource(v1.GroupVersionResource).Namespace(ns).Patch(ctx, vm.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		require.NoError(t, err)
		out, errOut, err := e.plugin(ctx, "console", vm.Name, "--print-vv")
		require.NoError(t, err, "stderr: %s", errOut)
		require.Equal(t, "localhost", vvKey(t, out, "host"))
		require.Equal(t, fmt.Sprint(port), vvKey(t, out, "port"))
		require.Equal(t, "http://proxy.example:3128", vvKey(t, out, "proxy"))
		ok, err := spicetest.Login(ctx, spice, vvKey(t, out, "password"))
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("GitOps mode", func(t *testing.T) {
		// Only rendered objects: no VirtualMachine, so no status to wait
		// for. The SPICE login itself is the runner's, tested above.
		var g v1.VirtualMachine
		require.NoError(t, yaml.UnmarshalStrict([]byte(fmt.Sprintf(vmManifest, "gitops", port)), &g))
		gobjs, err := render.Render(&g, render.Options{})
		require.NoError(t, err)
		_, err = e.kube.AppsV1().StatefulSets(ns).Create(ctx, gobjs.StatefulSet, metav1.CreateOptions{})
		require.NoError(t, err)
		e.exposeService(gobjs)
		e.createDisplaySecret(g.Name)
		e.runPod(g.Name)

		out, errOut, err := e.plugin(ctx, "console", g.Name, "--print-vv", "--expiry", "20s")
		require.NoError(t, err, "stderr: %s", errOut)
		require.Contains(t, errOut, "has no VirtualMachine (GitOps mode)")
		require.Equal(t, "127.0.0.1", vvKey(t, out, "host"))
		require.Equal(t, fmt.Sprint(port), vvKey(t, out, "port"))
		s, err := e.kube.CoreV1().Secrets(ns).Get(ctx, render.DisplaySecretName(g.Name), metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, vvKey(t, out, "password"), string(s.Data[vmpod.DisplayPasswordFile]))
		require.Equal(t, "+20", string(s.Data[vmpod.PasswordExpiryFile]))
		pod, err := e.kube.CoreV1().Pods(ns).Get(ctx, g.Name+"-0", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, s.ResourceVersion, pod.Annotations[podsync.AnnotationPasswordSerial], "the kubelet is nudged to refresh the Secret")
	})

	t.Run("errors", func(t *testing.T) {
		fail := func(args ...string) string {
			t.Helper()
			out, _, err := e.plugin(ctx, args...)
			require.Error(t, err, "kubectl vm %s: %s", strings.Join(args, " "), out)
			return err.Error()
		}
		require.Contains(t, fail("console", "nosuch", "--print-vv"), `virtual machine "nosuch" not found in namespace "console"`)

		noSpice := strings.Replace(fmt.Sprintf(vmManifest, "no-spice", port), "spice:\n        port: "+fmt.Sprint(port), "outputs: 1", 1)
		e.createVM(noSpice)
		require.Equal(t, "no-spice has no SPICE display (spec.vm.display.spice)", fail("console", "no-spice", "--print-vv"))

		e.createVM(fmt.Sprintf(vmManifest, "stopped", port))
		require.Equal(t, "stopped is not running: start it with kubectl vm start stopped", fail("console", "stopped", "--no-launch"))

		t.Setenv("PATH", t.TempDir())
		require.Equal(t, console.Viewer+" not found: install virt-viewer, or use --print-vv / --no-launch", fail("console", vm.Name))
	})
}
