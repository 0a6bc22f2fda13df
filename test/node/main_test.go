// Package node walks a user's journeys with vmop on a real node: a
// kubelet with containerd and runc (test/harness/testnode) runs vmop's own
// images, built as make images builds them, and the test guest boots in
// the VM's pod from a Block disk. Commands go through the real kubectl,
// which finds kubectl-vm on PATH as it would for a user.
package node

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/internal/imagebuild"
	"github.com/vmop/vmop/pkg/api/nodeagent"
	"github.com/vmop/vmop/pkg/vm-runner/serialconsole"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/gitops"
	"github.com/vmop/vmop/test/harness/prereq"
	"github.com/vmop/vmop/test/harness/testnode"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

var (
	node *testnode.Node
	// binDir holds kubectl-vm, first on the PATH of kubectl commands.
	binDir string
	// impostorImage runs test/node/impostor.
	impostorImage string
	// gitopsBuild holds the images and manifests of Argo CD and Flux.
	gitopsBuild gitops.Build
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if prereq.ShortMain("root, containerd, a control plane and qemu (a real node)") {
		return 0
	}
	if err := testnode.Check(); err != nil {
		fmt.Fprintln(os.Stderr, "the node tests need:", err)
		return 1
	}
	dir, err := os.MkdirTemp("", "vmop-node-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	cleanup, err := vmopbin.Setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	archives, err := build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "building:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	node, err = testnode.Start(ctx, testnode.Options{Images: archives})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "test node:", err)
		return 1
	}
	if err := installNodeAgent(); err != nil {
		fmt.Fprintln(os.Stderr, "installing the node agent:", err)
		_ = node.Stop()
		return 1
	}
	code := m.Run()
	if code != 0 {
		for _, p := range append(node.Processes(), node.Kubelet, node.Scheduler) {
			fmt.Fprintf(os.Stderr, "--- %s log (%s), last lines:\n%s\n", p.Name, p.Log, p.LogTail(40))
		}
		lines := strings.Split(strings.TrimSpace(node.Containerd.Log()), "\n")
		fmt.Fprintf(os.Stderr, "--- containerd log (in %s), last lines:\n%s\n", node.Containerd.Dir, strings.Join(lines[max(0, len(lines)-40):], "\n"))
	}
	if err := node.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping the test node:", err)
		code = 1
	}
	return code
}

// installNodeAgent installs vmop's node agent alone, as for GitOps, and
// waits until the node offers its device resource: every VM pod needs it.
// unpullableRepository is a runner repository on a loopback registry
// that refuses: TestFaults' image that cannot be pulled is of a repository
// the agent trusts, else admission refuses its pod before any pull.
const unpullableRepository = "127.0.0.1:1/vmop/vm-runner"

// installArgs are the arguments of every kubectl vm install here, more
// last: each install sets the repositories the agent trusts anew.
func installArgs(more ...string) []string {
	return append([]string{"vm", "install", "--wait", "--timeout", "3m", "--kubelet-root-dir", node.KubeletRootDir(),
		"--runner-repository", unpullableRepository}, more...)
}

func installNodeAgent() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	out, err := kubectlCmd(ctx, installArgs("--node-agent-only")...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kubectl vm install --node-agent-only: %w\n%s", err, out)
	}
	for ctx.Err() == nil {
		n, err := node.Client.CoreV1().Nodes().Get(ctx, testnode.Name, metav1.GetOptions{})
		if err == nil {
			if q, ok := n.Status.Allocatable[nodeagent.Resource]; ok && !q.IsZero() {
				return nil
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("the node offers no %s: the agent's device plugin did not register", nodeagent.Resource)
}

// build makes vmop's images as make images does, with the version of a
// plugin built without flags ("devel"), and the plugin itself.
func build(dir string) ([]string, error) {
	o, err := imagebuild.DevOptions(filepath.Join(dir, "images"))
	if err != nil {
		return nil, err
	}
	built, err := imagebuild.Build(o)
	if err != nil {
		return nil, err
	}
	impostor, err := imagebuild.Program(o, "vmop-impostor", "./test/node/impostor")
	if err != nil {
		return nil, err
	}
	impostorImage = impostor.Ref.String()
	archives := []string{impostor.Archive}
	for _, b := range built {
		archives = append(archives, b.Archive)
	}
	if gitopsBuild, err = gitops.Images(o.Module); err != nil {
		return nil, err
	}
	for _, b := range gitopsBuild.Images {
		archives = append(archives, b.Archive)
	}
	plugin, err := vmopbin.Path("kubectl-vm")
	if err != nil {
		return nil, err
	}
	binDir = filepath.Dir(plugin)
	return archives, nil
}

// kubectl runs the real kubectl against the node's cluster, with
// kubectl-vm on its PATH, and fails t unless it succeeds.
func kubectl(t testing.TB, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := kubectlResult(t.Context(), stdin, args...)
	require.NoError(t, err, "kubectl %s\nstdout: %s\nstderr: %s", strings.Join(args, " "), out, errOut)
	return out
}

func kubectlResult(ctx context.Context, stdin string, args ...string) (stdout, stderr string, err error) {
	cmd := kubectlCmd(ctx, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// kubectlCmd is the real kubectl against the node's cluster, with
// kubectl-vm on its PATH. KUBECONFIG, not --kubeconfig: kubectl takes no
// flags before a plugin's name.
func kubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"), "KUBECONFIG="+node.Kubeconfig)
	return cmd
}

// once runs an install the first time a test asks for it; an install
// that fails its test is tried again by the next.
type once struct {
	mu   sync.Mutex
	done bool
}

func (o *once) do(t *testing.T, install func()) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.done {
		install()
		o.done = true
	}
}

// runWorkloads scales workloads (kind/name) of namespace ns to one
// replica and waits until they are ready; the end of t scales them to
// none, so that they do not load the tests after it.
func runWorkloads(t *testing.T, ns string, workloads ...string) {
	t.Helper()
	kubectl(t, "", append([]string{"scale", "-n", ns, "--replicas=1"}, workloads...)...)
	for _, w := range workloads {
		kubectl(t, "", "rollout", "status", "-n", ns, w, "--timeout", "5m")
	}
	t.Cleanup(func() {
		_, _, _ = kubectlResult(context.Background(), "", append([]string{"scale", "-n", ns, "--replicas=0"}, workloads...)...)
	})
}

// installVmop installs vmop as a user of this node must: its kubelet's
// root directory is not the default.
func installVmop(t testing.TB, args ...string) {
	t.Helper()
	kubectl(t, "", installArgs(args...)...)
}

// createNamespace makes a namespace for one journey, where Pod Security
// enforces the restricted level, as strict clusters do.
func createNamespace(t testing.TB, name string) {
	t.Helper()
	createNamespaceAt(t, name, "restricted")
}

// createNamespaceAt makes a namespace that enforces Pod Security level.
func createNamespaceAt(t testing.TB, name, level string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": level,
	}}}
	_, err := node.Client.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	require.NoError(t, err)
}

// runnerPID is the host pid of the runner in the VM's pod.
func runnerPID(ctx context.Context, ns, vm string) (int, error) {
	pod, err := node.Client.CoreV1().Pods(ns).Get(ctx, vm+"-0", metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].ContainerID == "" {
		return 0, fmt.Errorf("pod %s/%s has no running container (%s)", ns, pod.Name, pod.Status.Phase)
	}
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	return node.Containerd.PID(ctx, id)
}

// qemuPID is the process of qemu, a child of the runner's runner.
func qemuPID(t testing.TB, runner int) int {
	t.Helper()
	// Each thread lists the children it started: Go starts them on any.
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", runner))
	require.NoError(t, err)
	var children []byte
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		children = append(children, b...)
	}
	for _, f := range strings.Fields(string(children)) {
		pid, _ := strconv.Atoi(f)
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(comm), "qemu-system") {
			return pid
		}
	}
	t.Fatalf("no qemu among the runner's children %q", children)
	return 0
}

// consoleLog is what the guest wrote on its serial console, read through
// the runner's root file system on the node (the runner image has no
// shell for kubectl exec).
func consoleLog(ctx context.Context, ns, vm string) (string, error) {
	pid, err := runnerPID(ctx, ns, vm)
	if err != nil {
		return "", err
	}
	return runnerConsole(pid, vm)
}

// runnerConsole is what the runner of pid has read from its guest's
// console; only /proc tells, with no API server.
func runnerConsole(pid int, vm string) (string, error) {
	// The runner's runtime directory is named after its uid: 107, or 0
	// in the privileged pod of a VM with a tap NIC.
	fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	if err != nil {
		return "", err
	}
	uid := fi.Sys().(*syscall.Stat_t).Uid
	b, err := serialconsole.ReadHistory(fmt.Sprintf("/proc/%d/root/tmp/vmrunner-%d/%s", pid, uid, vm))
	return string(b), err
}

// waitConsole waits until the guest's console has a line starting with
// prefix and returns that line.
func waitConsole(t testing.TB, ns, vm, prefix string, timeout time.Duration) string {
	t.Helper()
	var found string
	eventually.Within(t, timeout, func() string {
		log, err := consoleLog(t.Context(), ns, vm)
		if err != nil {
			return fmt.Sprintf("console of %s/%s: %v", ns, vm, err)
		}
		for _, l := range strings.Split(log, "\n") {
			if i := strings.Index(l, prefix); i >= 0 {
				found = strings.TrimSpace(l[i:])
				return ""
			}
		}
		return fmt.Sprintf("no %q on the console of %s/%s; it says:\n%s", prefix, ns, vm, log)
	})
	return found
}

// runnerLogAttrs are the values of attribute attr in the runner's log
// lines (logfmt) whose message is msg, in order; none when the logs
// cannot be read.
func runnerLogAttrs(t testing.TB, ns, vm, msg, attr string) []string {
	t.Helper()
	out, _, err := kubectlResult(t.Context(), "", "logs", "-n", ns, vm+"-0")
	if err != nil {
		return nil
	}
	var vals []string
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, `msg="`+msg+`"`) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, attr+"="); ok {
				vals = append(vals, v)
			}
		}
	}
	return vals
}

// runnerLogTime returns the time of the runner's first log line after
// since whose message is msg, from kubectl logs.
func runnerLogTime(t testing.TB, ns, vm, msg string, since time.Time) (time.Time, bool) {
	t.Helper()
	for _, ts := range runnerLogAttrs(t, ns, vm, msg, "time") {
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err == nil && !at.Before(since) {
			return at, true
		}
	}
	return time.Time{}, false
}
