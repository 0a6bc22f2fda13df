package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/podsync"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/pkg/runnerconfig"
	"github.com/vmop/vmop/pkg/vmpod"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/plugintest"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// stoppedVM is runningVM, stopped.
var stoppedVM = strings.Replace(runningVM, "state: Running", "state: Stopped", 1)

// plugin runs "kubectl vm" in this process against the cluster.
func (e *env) plugin(ctx context.Context, args ...string) (stdout, stderr string, err error) {
	r := plugintest.Run(ctx, "", append([]string{"--kubeconfig", e.c.Kubeconfig}, args...)...)
	return r.Stdout, r.Stderr, r.Err
}

// TestCommands runs the plugin's everyday commands in both modes: with
// the operator (they patch the VirtualMachine) and with rendered objects
// only (they change the StatefulSet and ConfigMap and warn).
func TestCommands(t *testing.T) {
	e := newEnv(t)
	op := e.startOperator("vm-operator")
	eventually.Within(t, 30*time.Second, func() string {
		if op.logContains("Starting workers") {
			return ""
		}
		return "the operator did not start"
	})
	ctx := t.Context()
	run := func(t *testing.T, args ...string) (string, string) {
		t.Helper()
		out, errOut, err := e.plugin(ctx, args...)
		require.NoError(t, err, "kubectl vm %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
		return out, errOut
	}
	fail := func(t *testing.T, args ...string) string {
		t.Helper()
		_, _, err := e.plugin(ctx, args...)
		require.Error(t, err, "kubectl vm %s", strings.Join(args, " "))
		return err.Error()
	}
	// The mode tests run as a person bound only to the vm-user role that
	// installRBAC applied as `kubectl vm install` does, so that a right the
	// commands need and the role lacks fails.
	asVMUser := func(t *testing.T, ns string) (func(*testing.T, ...string) (string, string), func(*testing.T, ...string) string) {
		const user = "vm-user-alice"
		_, err := e.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: install.UserClusterRole},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		require.NoError(t, testcluster.WaitAllowed(ctx, e.kube, user, ns, rbacv1.PolicyRule{APIGroups: []string{v1.Group}, Resources: []string{v1.Resource}, Verbs: []string{"get", "patch"}}))
		return func(t *testing.T, args ...string) (string, string) {
				t.Helper()
				return run(t, append([]string{"--as", user}, args...)...)
			}, func(t *testing.T, args ...string) string {
				t.Helper()
				return fail(t, append([]string{"--as", user}, args...)...)
			}
	}

	t.Run("operator mode", func(t *testing.T) {
		ns := e.namespace("op-mode", nil)
		run, fail := asVMUser(t, ns)
		e.createVM(ns, fmt.Sprintf(stoppedVM, "vm1"))

		out, errOut := run(t, "start", "-n", ns, "vm1", "--wait", "--timeout", "60s")
		require.Contains(t, out, "vm1 started")
		require.Contains(t, out, "vm1: Running")
		require.Empty(t, errOut, "no GitOps warning")
		require.Equal(t, metav1.ConditionTrue, condition(status(e.getVM(ns, "vm1")), v1.ConditionRunning).Status)
		out, _ = run(t, "start", "-n", ns, "vm1")
		require.Equal(t, "vm1 is already running\n", out)

		run(t, "set", "-n", ns, "vm1", "--cpus", "3", "--ram", "1536Mi")
		spec := e.vmSpec(t, ns, "vm1")
		require.EqualValues(t, 3, *spec.CurrentCPUs)
		require.Equal(t, v1.Quantity("1536Mi"), spec.CurrentRAM)
		// The operator writes the ConfigMap, then annotates the pod.
		e.waitConfig(t, ns, "vm1", "currentCpus: 3")
		e.waitPodSynced(t, ns, "vm1")
		require.Contains(t, fail(t, "set", "-n", ns, "vm1", "--cpus", "8"), "--cpus 8: more than spec.vm.maximumCpus (4)")
		require.Contains(t, fail(t, "set", "-n", ns, "vm1", "--ram", "3Gi"), "--ram 3Gi: more than spec.vm.maximumRam (2Gi)")
		require.Contains(t, fail(t, "set", "-n", ns, "vm1"), "nothing to set")

		run(t, "cdrom", "-n", ns, "vm1", "insert", "installer.iso")
		require.Equal(t, "installer.iso", e.vmSpec(t, ns, "vm1").Disks[1].CDROM.Image)
		e.waitConfig(t, ns, "vm1", "installer.iso")
		run(t, "cdrom", "-n", ns, "vm1", "eject")
		require.Empty(t, e.vmSpec(t, ns, "vm1").Disks[1].CDROM.Image)
		require.Contains(t, fail(t, "cdrom", "-n", ns, "vm1", "--drive", "1", "eject"), "vm1 has no CD drive 1 (it has 1")
		require.Contains(t, fail(t, "cdrom", "-n", ns, "vm1", "open"), `unknown action "open"`)

		run(t, "reset", "-n", ns, "vm1")
		run(t, "reset", "-n", ns, "vm1")
		require.Equal(t, "2", e.getVM(ns, "vm1").GetAnnotations()[v1.AnnotationResetCounter])
		e.waitConfig(t, ns, "vm1", "resetCounter: 2")

		pod := e.pod(t, ns, "vm1-0")
		out, _ = run(t, "restart", "-n", ns, "vm1", "--wait", "--timeout", "60s")
		require.Contains(t, out, "vm1: Running")
		require.NotEqual(t, pod.UID, e.pod(t, ns, "vm1-0").UID, "a new pod")

		out, _ = run(t, "stop", "-n", ns, "vm1", "--wait", "--grace-period", "0", "--timeout", "60s")
		require.Contains(t, out, "vm1: Stopped")
		require.Equal(t, v1.ReasonStopped, condition(status(e.getVM(ns, "vm1")), v1.ConditionRunning).Reason)
		out, _ = run(t, "stop", "-n", ns, "vm1")
		require.Equal(t, "vm1 is already stopped\n", out, "stopping a stopped VM is no error")
		require.Contains(t, fail(t, "restart", "-n", ns, "vm1"), "vm1 is not running; use start")
		require.Contains(t, fail(t, "reset", "-n", ns, "vm1"), "vm1 is not running")
	})

	t.Run("GitOps mode", func(t *testing.T) {
		ns := e.namespace("gitops-mode", nil)
		run, fail := asVMUser(t, ns)
		e.applyRendered(t, ns, fmt.Sprintf(stoppedVM, "g1"))

		out, errOut := run(t, "start", "-n", ns, "g1", "--wait", "--timeout", "60s")
		require.Contains(t, out, "g1: Running")
		require.Contains(t, errOut, "has no VirtualMachine (GitOps mode)")
		require.Contains(t, errOut, "the next sync from Git undoes this")
		require.EqualValues(t, 1, *e.statefulSet(t, ns, "g1").Spec.Replicas)

		_, errOut = run(t, "set", "-n", ns, "g1", "--cpus", "2", "--ram", "1Gi")
		require.Contains(t, errOut, "GitOps mode")
		require.NotContains(t, errOut, "may take a minute")
		cfg := e.runnerConfig(t, ns, "g1")
		require.EqualValues(t, 2, cfg.VM.CurrentCPUs)
		require.EqualValues(t, 1<<30, cfg.VM.CurrentRAM.Bytes)
		// The plugin annotated the pod before it returned.
		cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(ctx, "g1", metav1.GetOptions{})
		require.NoError(t, err)
		require.Equal(t, cm.ResourceVersion, e.pod(t, ns, "g1-0").Annotations[podsync.AnnotationConfigVersion])
		require.Contains(t, fail(t, "set", "-n", ns, "g1", "--cpus", "5"), "--cpus 5: more than ConfigMap g1: /Runner.vm.maximumCpus (4)")

		run(t, "cdrom", "-n", ns, "g1", "insert", "x.iso")
		require.Equal(t, vmpod.ImageRepositoryDir+"/x.iso", e.runnerConfig(t, ns, "g1").VM.Drives[1].File)
		run(t, "reset", "-n", ns, "g1")
		require.EqualValues(t, 1, e.runnerConfig(t, ns, "g1").ResetCounter)

		pod := e.pod(t, ns, "g1-0")
		out, errOut = run(t, "restart", "-n", ns, "g1", "--wait", "--timeout", "60s")
		require.Contains(t, out, "g1: Running")
		require.Empty(t, errOut, "a restart leaves what Git says alone")
		require.NotEqual(t, pod.UID, e.pod(t, ns, "g1-0").UID, "a new pod")

		out, _ = run(t, "stop", "-n", ns, "g1", "--wait", "--timeout", "60s")
		require.Contains(t, out, "g1: Stopped")
		require.EqualValues(t, 0, *e.statefulSet(t, ns, "g1").Spec.Replicas)
	})

	t.Run("expose", func(t *testing.T) {
		// A Service for a running VM's pod, in both modes, as a vm-user;
		// in operator mode the garbage collector deletes it with the VM.
		withNet := func(networks string) string {
			return strings.Replace(runningVM, "    display:", "    networks: "+networks+"\n    display:", 1)
		}
		for _, m := range []struct {
			mode, manifest, warning string
			operator                bool
		}{
			{"operator", withNet("[{pod: {ports: [{port: 22}]}}]"), "guest port 80/TCP is not one its pod network passes (spec.vm.networks[0].pod.ports: 22/TCP): Service port 8080 reaches nothing of the guest", true},
			{"gitops", withNet("[{user: {}}]"), "the guest is not on the pod network (its networks: user): the Service reaches nothing of the guest", false},
		} {
			t.Run(m.mode, func(t *testing.T) {
				ns := e.namespace("expose-"+m.mode, nil)
				run, fail := asVMUser(t, ns)
				if m.operator {
					e.createVM(ns, fmt.Sprintf(m.manifest, "x1"))
				} else {
					e.applyRendered(t, ns, fmt.Sprintf(m.manifest, "x1"))
				}
				out, errOut := run(t, "expose", "-n", ns, "x1", "--port", "22", "--port", "8080:80", "--type", "NodePort")
				require.Equal(t, "service/x1-22 created\n", out)
				require.Equal(t, "warning: "+ns+"/x1: "+m.warning+"\n", errOut)
				require.Contains(t, fail(t, "expose", "-n", ns, "x1", "--port", "22"), `service "x1-22" already exists in namespace "`+ns+`"`)

				svc, err := e.kube.CoreV1().Services(ns).Get(ctx, "x1-22", metav1.GetOptions{})
				require.NoError(t, err)
				require.Equal(t, corev1.ServiceTypeNodePort, svc.Spec.Type)
				require.Len(t, svc.Spec.Ports, 2)
				for i, want := range [][2]int32{{22, 22}, {8080, 80}} {
					p := svc.Spec.Ports[i]
					require.Equal(t, want[0], p.Port)
					require.Equal(t, intstr.FromInt32(want[1]), p.TargetPort)
					require.Equal(t, corev1.ProtocolTCP, p.Protocol)
					require.NotZero(t, p.NodePort)
				}
				var sts *appsv1.StatefulSet
				eventually.Within(t, 30*time.Second, func() string {
					if sts, err = e.kube.AppsV1().StatefulSets(ns).Get(ctx, "x1", metav1.GetOptions{}); err != nil {
						return err.Error()
					}
					return ""
				})
				require.Equal(t, sts.Spec.Selector.MatchLabels, svc.Spec.Selector, "the StatefulSet's selector")
				for k, v := range svc.Spec.Selector {
					require.Equal(t, v, sts.Spec.Template.Labels[k], "the pod template's label %s", k)
				}
				// The pods the Service selects, as the API server reads its
				// selector: the VM's.
				eventually.Within(t, 30*time.Second, func() string {
					pods, err := e.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: labels.SelectorFromSet(svc.Spec.Selector).String()})
					if err != nil {
						return err.Error()
					}
					if len(pods.Items) != 1 || pods.Items[0].Name != render.PodName("x1") {
						return fmt.Sprintf("service x1-22 selects %d pods, not only x1-0", len(pods.Items))
					}
					return ""
				})

				if !m.operator {
					require.Empty(t, svc.OwnerReferences, "GitOps mode: the user deletes it")
					return
				}
				vm := e.getVM(ns, "x1")
				require.Equal(t, []metav1.OwnerReference{{APIVersion: v1.APIVersion, Kind: v1.Kind, Name: "x1", UID: vm.GetUID()}}, svc.OwnerReferences)
				require.NoError(t, e.vms(ns).Delete(ctx, "x1", metav1.DeleteOptions{}))
				eventually.Within(t, 60*time.Second, func() string {
					_, err := e.kube.CoreV1().Services(ns).Get(ctx, "x1-22", metav1.GetOptions{})
					if apierrors.IsNotFound(err) {
						return ""
					}
					return fmt.Sprintf("service x1-22 outlives its VM: %v", err)
				})
			})
		}
	})

	t.Run("errors of every command", func(t *testing.T) {
		for _, args := range [][]string{
			{"start", "nope"}, {"stop", "nope"}, {"restart", "nope"}, {"reset", "nope"},
			{"set", "nope", "--cpus", "1"}, {"cdrom", "nope", "eject"}, {"status", "nope"}, {"console", "nope", "--print-vv"},
			{"expose", "nope", "--port", "22"},
		} {
			name := strings.Join(args, " ")
			msg := fail(t, append([]string{"-n", "default"}, args...)...)
			require.Contains(t, msg, `virtual machine "nope" not found in namespace "default"`, name)

			msg = fail(t, append([]string{"--server", "https://127.0.0.1:1", "--insecure-skip-tls-verify"}, args...)...)
			require.Contains(t, msg, "cannot reach the cluster at https://127.0.0.1:1", name)
			require.NotContains(t, msg, "\n", "%s: one line", name)

			msg = fail(t, append([]string{"--as", "nobody", "-n", "default"}, args...)...)
			require.Contains(t, msg, `User "nobody" cannot get resource "vms"`, name)
			require.Contains(t, msg, "ask a cluster administrator", name)
		}
		msg := fail(t, "--as", "nobody", "list", "-n", "default")
		require.Contains(t, msg, `User "nobody" cannot list resource "vms"`)
	})

	t.Run("kubectl finds the plugin", func(t *testing.T) {
		ns := e.namespace("kubectl", nil)
		e.createVM(ns, fmt.Sprintf(stoppedVM, "k1"))
		dir := t.TempDir()
		bin := filepath.Dir(vmopbin.Build(t, "kubectl-vm"))
		// kubectl takes no flags before a plugin's name: the kubeconfig
		// comes from the environment.
		kubectl := exec.CommandContext(ctx, "kubectl", "vm", "start", "-n", ns, "k1")
		kubectl.Env = append(os.Environ(), "KUBECONFIG="+e.c.Kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := kubectl.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "k1 started\n", string(out))

		// kubectl vm create: the operator renders the new VM as
		// kubectl vm render would; a second create fails and changes
		// nothing.
		key := filepath.Join(dir, "id.pub")
		pub, _, err := ed25519.GenerateKey(rand.Reader)
		require.NoError(t, err)
		sshPub, err := ssh.NewPublicKey(pub)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(key, ssh.MarshalAuthorizedKey(sshPub), 0o600))
		userData := filepath.Join(dir, "user-data.yaml")
		require.NoError(t, os.WriteFile(userData, []byte("#cloud-config\nhostname: k2\n"), 0o600))
		create := func() *exec.Cmd {
			cmd := exec.CommandContext(ctx, "kubectl", "vm", "create", "-n", ns, "k2", "--cpus", "2", "--max-cpus", "4", "--ram", "1Gi",
				"--disk", "1Gi", "--cdrom", "installer.iso", "--cloud-init-user-data", userData, "--ssh-key", key)
			cmd.Env = kubectl.Env
			return cmd
		}
		out, err = create().CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "virtualmachine.vmoperator.jdrupes.org/k2 created\n", string(out))
		created := e.getVM(ns, "k2")
		e.requireRendered(t, created, nil)
		require.Contains(t, e.runnerConfig(t, ns, "k2").VM.Drives[1].File, "installer.iso")
		out, err = create().CombinedOutput()
		require.Error(t, err)
		require.Equal(t, "error: virtual machine \"k2\" already exists in namespace \""+ns+"\": nothing changed (change it with kubectl vm set, kubectl edit or kubectl apply)\n", string(out))
		after := e.getVM(ns, "k2")
		require.Equal(t, created.GetGeneration(), after.GetGeneration(), "the spec is unchanged")
		require.Equal(t, created.Object["spec"], after.Object["spec"])
	})
}

// vmSpec is the VM's spec.vm as stored.
func (e *env) vmSpec(t *testing.T, ns, name string) v1.VMSpec {
	b, err := e.getVM(ns, name).MarshalJSON()
	require.NoError(t, err)
	vm, err := v1.DecodeJSON(b)
	require.NoError(t, err)
	return vm.Spec.VM
}

// runnerConfig parses the VM's ConfigMap as the runner would.
func (e *env) runnerConfig(t *testing.T, ns, name string) *runnerconfig.Config {
	cm, err := e.kube.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	require.NoError(t, err)
	cfg, err := runnerconfig.Parse([]byte(cm.Data[vmpod.ConfigFile]))
	require.NoError(t, err)
	return cfg
}

// applyRendered creates what kubectl vm render makes of a VM, without the
// VirtualMachine: GitOps mode.
func (e *env) applyRendered(t *testing.T, ns, manifest string) {
	var vm v1.VirtualMachine
	require.NoError(t, yaml.UnmarshalStrict([]byte(manifest), &vm))
	vm.Namespace = ns
	objs, err := render.Render(&vm, render.Options{})
	require.NoError(t, err)
	ctx := t.Context()
	for _, o := range objs.List() {
		switch o := o.(type) {
		case *corev1.ConfigMap:
			_, err = e.kube.CoreV1().ConfigMaps(ns).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Secret:
			_, err = e.kube.CoreV1().Secrets(ns).Create(ctx, o, metav1.CreateOptions{})
		case *appsv1.StatefulSet:
			_, err = e.kube.AppsV1().StatefulSets(ns).Create(ctx, o, metav1.CreateOptions{})
		default:
			t.Fatalf("unexpected %T", o)
		}
		require.NoError(t, err)
	}
}
