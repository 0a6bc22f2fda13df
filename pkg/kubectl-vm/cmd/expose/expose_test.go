package expose_test

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/kubectl-vm/cmd/expose"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/golden"
	"github.com/vmop/vmop/test/harness/plugintest"
)

// Golden files: testdata/expose/<case>.yaml|json for what -o prints,
// testdata/errors/<case>.txt for what bad input gets; rewrite them with
// "go test ./pkg/kubectl-vm/cmd/expose -update".

// run runs "kubectl vm ARGS" in-process.
func run(t testing.TB, args ...string) plugintest.Result {
	t.Helper()
	return plugintest.Run(t.Context(), "", args...)
}

// goldenCases are flag sets whose -o output is a golden file; with -o
// nothing is sent, so no cluster is needed.
var goldenCases = map[string][]string{
	// One port, the defaults: ClusterIP, TCP, named web-22.
	"ssh": {"expose", "web", "--port", "22"},
	// Service ports that differ from the guest's, a name, a namespace.
	"load-balancer": {"expose", "web", "-n", "vms", "--port", "80:8080", "--port", "443:8443", "--type", "LoadBalancer", "--name", "web-http"},
	// UDP on a node port.
	"node-port-udp": {"expose", "dns", "--port", "53", "--type", "NodePort", "--protocol", "UDP"},
}

// TestGolden checks the -o yaml output of each flag set, and that it is
// one Service that selects the VM's pod as its StatefulSet does.
func TestGolden(t *testing.T) {
	for name, args := range goldenCases {
		t.Run(name, func(t *testing.T) {
			out := plugintest.GoldenYAML(t, filepath.Join("testdata", "expose", name+".yaml"), args...)
			svc := decodeService(t, out)
			require.Equal(t, render.SelectorLabels(args[1]), svc.Spec.Selector)
			require.Equal(t, render.Labels(args[1]), svc.Labels)
			require.Empty(t, svc.OwnerReferences, "printed for Git: no cluster's UID")
		})
	}
	r := run(t, "expose", "web", "--port", "22", "-o", "json")
	require.NoError(t, r.Err)
	golden.Assert(t, filepath.Join("testdata", "expose", "ssh.json"), []byte(r.Stdout))
}

// decodeService decodes the only document of a YAML stream, a Service.
func decodeService(t *testing.T, stream string) *corev1.Service {
	t.Helper()
	r := manifest.NewReader(strings.NewReader(stream))
	d, err := r.Next()
	require.NoError(t, err)
	require.Equal(t, "Service", d.Kind)
	var svc corev1.Service
	require.NoError(t, yaml.UnmarshalStrict(d.Raw, &svc))
	_, err = r.Next()
	require.ErrorIs(t, err, io.EOF, "one document")
	return &svc
}

// TestWhatTheFlagsMean checks the load balancer case field by field,
// beyond its golden file.
func TestWhatTheFlagsMean(t *testing.T) {
	r := run(t, append(goldenCases["load-balancer"], "-o", "yaml")...)
	require.NoError(t, r.Err)
	svc := decodeService(t, r.Stdout)
	require.Equal(t, "web-http", svc.Name)
	require.Equal(t, "vms", svc.Namespace)
	require.Equal(t, corev1.ServiceTypeLoadBalancer, svc.Spec.Type)
	require.Equal(t, []corev1.ServicePort{
		{Name: "p80", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
		{Name: "p443", Port: 443, TargetPort: intstr.FromInt32(8443), Protocol: corev1.ProtocolTCP},
	}, svc.Spec.Ports)
}

func TestDryRunClient(t *testing.T) {
	r := run(t, "expose", "web", "--port", "22", "--dry-run")
	require.NoError(t, r.Err)
	require.Equal(t, "service/web-22 created (dry run)\n", r.Stdout)
}

// badInput is input that must be refused, before anything is printed or
// sent; the error is testdata/errors/<case>.txt.
var badInput = map[string][]string{
	"no port":          {"web"},
	"port 0":           {"web", "--port", "0"},
	"port too big":     {"web", "--port", "65536"},
	"guest port":       {"web", "--port", "22:ssh"},
	"port twice":       {"web", "--port", "22", "--port", "22:2222"},
	"type":             {"web", "--port", "22", "--type", "ExternalName"},
	"protocol":         {"web", "--port", "22", "--protocol", "SCTP"},
	"output":           {"web", "--port", "22", "-o", "wide"},
	"dry run":          {"web", "--port", "22", "--dry-run=maybe"},
	"name of the VM":   {"web", "--port", "22", "--name", "web"},
	"name":             {"web", "--port", "22", "--name", "Web_SSH"},
	"default too long": {strings.Repeat("v", 60), "--port", "2222"},
	"default a digit":  {"1web", "--port", "22"},
	"vm name":          {"Web", "--port", "22"},
	"all at once":      {"web", "--port", "x", "--port", "1:0", "--type", "nodeport", "--protocol", "tcp"},
}

// TestBadInput: bad flags are refused with lower-case errors that name
// the flag (or the VM's name), every problem at once.
func TestBadInput(t *testing.T) {
	for name, args := range badInput {
		t.Run(name, func(t *testing.T) {
			for _, mode := range [][]string{{"-o", "yaml"}, {"--dry-run=client"}} {
				if name == "output" && mode[0] == "-o" || name == "dry run" && mode[0] == "--dry-run=client" {
					continue
				}
				r := run(t, append(append([]string{"expose"}, args...), mode...)...)
				require.Error(t, r.Err)
				require.Empty(t, r.Stdout, "nothing printed")
				golden.Assert(t, filepath.Join("testdata", "errors", strings.ReplaceAll(strings.ToLower(name), " ", "-")+".txt"), []byte(r.Err.Error()+"\n"))
				for _, line := range strings.Split(r.Err.Error(), "\n") {
					require.True(t, strings.HasPrefix(line, "--") || strings.HasPrefix(line, "name "), "%q names no flag", line)
					require.False(t, unicode.IsUpper(rune(line[0])))
				}
			}
		})
	}
}

func TestParsePort(t *testing.T) {
	for in, want := range map[string]expose.Port{"22": {22, 22}, "80:8080": {80, 8080}, "65535:1": {65535, 1}} {
		p, err := expose.ParsePort(in)
		require.NoError(t, err, in)
		require.Equal(t, want, p, in)
	}
	for _, in := range []string{"", ":", "22:", ":22", "-1", "22:22:22", "0x16", "1e3"} {
		_, err := expose.ParsePort(in)
		require.Error(t, err, "%q", in)
	}
}
