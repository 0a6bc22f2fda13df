package node

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/test/harness/eventually"
	"github.com/vmop/vmop/test/harness/syncbuffer"
	"github.com/vmop/vmop/test/harness/testcluster"
	"github.com/vmop/vmop/test/harness/testguest"
)

// portsVM is the test guest with a NIC on qemu's user network, on which
// it serves its echo port (testguest.EchoPort). Nothing the guest might
// send leaves the machine: the test node drops what the pod network
// forwards elsewhere.
func portsVM(vm, ns string) string { return networkVM(vm, ns, "user: {}") }

// TestGuestPorts reaches the test guest's echo service with kubectl vm
// port-forward, in GitOps mode (no operator): local ports, --stdio, and
// kubectl vm ssh with the user's own ssh, whose ProxyCommand is
// port-forward --stdio. The guest has no SSH server: ssh meets its own
// words echoed, which shows the path both ways (the Debian guest's sshd,
// through vm-runner connect: test/debian).
func TestGuestPorts(t *testing.T) {
	const ns, vm = "ports", "echo"
	createNamespace(t, ns)
	grantRunner(t, ns)
	addGuestDisk(t, ns, vm)
	file := filepath.Join(t.TempDir(), "vm.yaml")
	require.NoError(t, os.WriteFile(file, []byte(portsVM(vm, ns)), 0o644))
	rendered := kubectl(t, "", "vm", "render", "--service-account", install.RunnerServiceAccount, "-f", file)
	kubectl(t, rendered, "apply", "-f", "-")
	t.Cleanup(func() {
		_, _, _ = kubectlResult(context.Background(), rendered, "delete", "-f", "-", "--wait", "--timeout", "3m")
	})
	waitConsole(t, ns, vm, testguest.EchoLine, 4*time.Minute)

	t.Run("local ports", func(t *testing.T) {
		cmd := kubectlCmd(t.Context(), "vm", "port-forward", "-n", ns, vm, ":7", "0:8")
		var stderr syncbuffer.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		var scanned chan struct{} // closed when the lines are read
		defer func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
			if scanned != nil {
				<-scanned
			}
		}()
		lines := bufio.NewScanner(stdout)
		local := map[string]string{} // guest port: local address
		forwarding := regexp.MustCompile(`^Forwarding from (127\.0\.0\.1:\d+) -> (\d+)$`)
		for len(local) < 2 && lines.Scan() {
			t.Log(lines.Text())
			if m := forwarding.FindStringSubmatch(lines.Text()); m != nil {
				local[m[2]] = m[1]
			}
		}
		require.Len(t, local, 2, "the Forwarding lines; stderr: %s", stderr.String())
		scanned = make(chan struct{})
		go func() { // "Handling connection for ..."
			defer close(scanned)
			for lines.Scan() {
				t.Log(lines.Text())
			}
		}()

		echo := func(c net.Conn, line string) {
			t.Helper()
			_, err := io.WriteString(c, line)
			require.NoError(t, err)
			got := make([]byte, len(line))
			require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
			_, err = io.ReadFull(c, got)
			require.NoError(t, err, "stderr: %s", stderr.String())
			require.Equal(t, line, string(got))
		}
		start := time.Now()
		a, err := net.Dial("tcp", local["7"])
		require.NoError(t, err)
		defer a.Close()
		echo(a, "hello through the pod\n")
		t.Logf("first echo %v after the connection", time.Since(start).Round(time.Millisecond))
		b, err := net.Dial("tcp", local["7"])
		require.NoError(t, err)
		defer b.Close()
		echo(b, "a second connection\n")
		echo(a, "the first one still works\n")
		// Half-closed: the guest's echo ends, and so does the connection.
		require.NoError(t, a.(*net.TCPConn).CloseWrite())
		rest, err := io.ReadAll(a)
		require.NoError(t, err)
		require.Empty(t, rest)

		// Nothing listens on the guest's port 8: the runner says so.
		c, err := net.Dial("tcp", local["8"])
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute)))
		_, err = io.ReadAll(c)
		require.NoError(t, err)
		t.Cleanup(func() { t.Logf("port-forward's stderr:\n%s", stderr.String()) })
		want := "error: echo: guest port 8: the connection was closed before the guest sent anything: does a service listen on port 8 in the guest?\n"
		eventually.Within(t, 10*time.Second, func() string {
			if strings.Contains(stderr.String(), want) {
				return ""
			}
			return "stderr: " + stderr.String()
		})
		echo(b, "port 8 did not disturb port 7\n")
		require.NotContains(t, stderr.String(), "UnhandledError", "client-go's noise about streams of closed connections")
	})

	t.Run("stdio", func(t *testing.T) {
		data := strings.Repeat("0123456789abcdef", 64<<10>>4) // 64 KiB
		out, errOut, err := kubectlResult(t.Context(), data, "vm", "port-forward", "--stdio", "7", "-n", ns, vm)
		require.NoError(t, err, "stderr: %s", errOut)
		require.Equal(t, len(data), len(out))
		require.Equal(t, data, out)
		require.Empty(t, errOut)
	})

	t.Run("ssh", func(t *testing.T) {
		// The user's own ssh; its ProxyCommand, kubectl-vm port-forward
		// --stdio, reaches the echo port, which sends ssh's own banner
		// back. ssh then waits forever in the key exchange for answers
		// that are its own words: the test ends it.
		home := t.TempDir()
		sshArgs := func(port string) []string {
			return []string{"vm", "ssh", "-n", ns, "-p", port, "-o", "BatchMode=yes",
				"-o", "UserKnownHostsFile=" + filepath.Join(home, "known_hosts"), "-o", "LogLevel=DEBUG1", "tester@" + vm, "--", "true"}
		}
		cmd := kubectlCmd(t.Context(), sshArgs("7")...)
		var stderr syncbuffer.Buffer
		cmd.Stderr = &stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		require.NoError(t, cmd.Start())
		eventually.Within(t, time.Minute, func() string {
			if strings.Contains(stderr.String(), "debug1: Remote protocol version 2.0, remote software version OpenSSH_") {
				return ""
			}
			return "ssh's banner from the guest; stderr:\n" + stderr.String()
		})
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // kubectl-vm, ssh and its ProxyCommand
		_ = cmd.Wait()
		t.Logf("kubectl %s:\n%s", strings.Join(sshArgs("7"), " "), stderr.String())
		require.Regexp(t, `debug1: Executing proxy command: exec \S+/kubectl-vm port-forward --stdio 7 echo -n ports`, stderr.String())

		// Nothing listens on port 8: ssh's exit code, and the runner's
		// word on why, reach the user.
		out, errOut, err := kubectlResult(t.Context(), "", sshArgs("8")...)
		t.Logf("kubectl %s:\n%s", strings.Join(sshArgs("8"), " "), errOut)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		require.Equal(t, 255, exit.ExitCode(), "ssh's exit code")
		require.Empty(t, out)
		require.Contains(t, errOut, "error: echo: guest port 8: the connection was closed before the guest sent anything")
	})

	t.Run("the rights docs/operator.md names", func(t *testing.T) {
		// get on the VM (virtualmachines, or its StatefulSet in GitOps
		// mode) and its pod, get and create on pods/exec: nothing more.
		rules := []rbacv1.PolicyRule{
			{APIGroups: []string{v1.Group}, Resources: []string{v1.Resource}, Verbs: []string{"get"}},
			{APIGroups: []string{"apps"}, Resources: []string{"statefulsets"}, Verbs: []string{"get"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
			// get: the WebSocket upgrade is a GET; create: SPDY's POST.
			{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"get", "create"}},
		}
		forwarder := serviceAccountWith(t, ns, "forwarder", rules)
		out, errOut, err := kubectlResult(t.Context(), "least rights\n", "vm", "port-forward", "--as", forwarder, "--stdio", "7", "-n", ns, vm)
		require.NoError(t, err, "stderr: %s", errOut)
		require.Equal(t, "least rights\n", out)

		viewer := serviceAccountWith(t, ns, "viewer", rules[:3])
		_, errOut, err = kubectlResult(t.Context(), "", "vm", "port-forward", "--as", viewer, "--stdio", "7", "-n", ns, vm)
		require.Error(t, err)
		t.Logf("without pods/exec: %s", errOut)
		require.Contains(t, errOut, "forbidden")
	})

	t.Run("errors", func(t *testing.T) {
		_, errOut, err := kubectlResult(t.Context(), "", "vm", "port-forward", "-n", ns, "nosuch", ":7")
		require.Error(t, err)
		t.Logf("not found: %s", errOut)
		require.Equal(t, "error: virtual machine \"nosuch\" not found in namespace \"ports\": no VirtualMachine and no StatefulSet rendered by kubectl vm\n", errOut)
		_, errOut, err = kubectlResult(t.Context(), "", "vm", "ssh", "-n", ns, "nosuch")
		require.Error(t, err)
		require.Contains(t, errOut, `error: virtual machine "nosuch" not found`)
		_, errOut, err = kubectlResult(t.Context(), "", "vm", "port-forward", "-n", ns, vm, "7000:x")
		require.Error(t, err)
		require.Equal(t, "error: port \"7000:x\": guest port \"x\": must be a number from 1 to 65535\n", errOut)

		kubectl(t, "", "vm", "stop", "-n", ns, vm, "--wait", "--timeout", "3m")
		_, errOut, err = kubectlResult(t.Context(), "", "vm", "port-forward", "--stdio", "7", "-n", ns, vm)
		require.Error(t, err)
		t.Logf("stopped: %s", errOut)
		require.Equal(t, "error: vm ports/echo is not running: it has no pod\n", errOut)
	})
}

// serviceAccountWith makes a ServiceAccount of namespace ns with a Role
// of rules, and returns the user name that impersonates it (--as).
func serviceAccountWith(t testing.TB, ns, name string, rules []rbacv1.PolicyRule) string {
	t.Helper()
	ctx := t.Context()
	_, err := node.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = node.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = node.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	user := "system:serviceaccount:" + ns + ":" + name
	require.NoError(t, testcluster.WaitAllowed(ctx, node.Client, user, ns, rules...))
	return user
}
