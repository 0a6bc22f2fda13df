package render

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/vmopbin"
)

// TestMain gives the benchmark's kubectl-vm a place (vmopbin).
func TestMain(m *testing.M) {
	os.Exit(vmopbin.Main(m))
}

// BenchmarkRenderVsHelm measures the kubectl-vm binary's render -f FILE
// against helm template on a chart (testdata/helm) that writes the same
// objects for the same VMs, as a user runs them: whole processes on one
// core (GOMAXPROCS=1 in both children), their CPU time (user+sys, from
// rusage) and peak RSS, alternating render and helm. The VMs are the
// local-path example with cloud-init user data, so a ConfigMap, a Secret,
// a StatefulSet and the runner's ServiceAccount, Role and RoleBinding each,
// all in one file. Helm's values are the VMs'
// fields, plus what only render computes (hashes, the runner config,
// resource requests). Both outputs are checked to hold the same objects
// first. It reports helm's CPU time over render's, each one's CPU time
// per VM and each one's peak RSS, which must not grow with the VMs for
// render (it streams). helm is built once by hack/build-helm.sh.
func BenchmarkRenderVsHelm(b *testing.B) {
	out, err := exec.Command("../../../../hack/build-helm.sh").Output()
	require.NoError(b, err, "hack/build-helm.sh")
	helm := strings.TrimSpace(string(out))
	dir := b.TempDir()
	kubectlVM, rusage := vmopbin.Build(b, "kubectl-vm"), filepath.Join(dir, "rusage")
	build := exec.Command("go", "build", "-o", rusage, "./testdata/rusage")
	build.Stderr = os.Stderr
	require.NoError(b, build.Run())
	doc, err := os.ReadFile("../../../../examples/local-path-test-vm.yaml")
	require.NoError(b, err)

	for _, n := range []int{1000, 10000} {
		vms, values := helmInputs(b, string(doc), n)
		vmsFile, valuesFile := filepath.Join(dir, "vms.yaml"), filepath.Join(dir, "values.yaml")
		require.NoError(b, os.WriteFile(vmsFile, vms, 0o644))
		require.NoError(b, os.WriteFile(valuesFile, values, 0o644))
		oneCore := append(os.Environ(), "GOMAXPROCS=1")
		renderCmd := []string{rusage, kubectlVM, "render", "-f", vmsFile}
		// Helm's own directories, so that it reads and writes nothing of the user's.
		helmCmd := []string{rusage, helm, "template", "vms", "testdata/helm", "-f", valuesFile}
		helmEnv := append(oneCore, "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)

		renderOut, _, _ := run(b, renderCmd, oneCore, nil)
		helmOut, _, _ := run(b, helmCmd, helmEnv, nil)
		// Helm writes the objects by kind (Secrets first), render by VM.
		want, got := readObjects(b, renderOut), readObjects(b, helmOut)
		for _, objs := range [][]map[string]any{want, got} {
			slices.SortStableFunc(objs, func(x, y map[string]any) int { return strings.Compare(objectKey(x), objectKey(y)) })
		}
		require.Len(b, want, 6*n)
		if diff := cmp.Diff(want, got); diff != "" {
			b.Fatalf("helm template writes other objects than render (-render +helm):\n%.3000s", diff)
		}

		b.Run(fmt.Sprintf("vms=%d", n), func(b *testing.B) {
			devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			require.NoError(b, err)
			defer devNull.Close()
			var renderCPU, helmCPU time.Duration
			var renderRSS, helmRSS int64
			for b.Loop() {
				_, cpu, rss := run(b, renderCmd, oneCore, devNull)
				renderCPU, renderRSS = renderCPU+cpu, max(renderRSS, rss)
				_, cpu, rss = run(b, helmCmd, helmEnv, devNull)
				helmCPU, helmRSS = helmCPU+cpu, max(helmRSS, rss)
			}
			vmRuns := float64(b.N * n)
			b.ReportMetric(float64(helmCPU)/float64(renderCPU), "helm/render-cpu")
			b.ReportMetric(float64(renderCPU.Nanoseconds())/vmRuns, "render-cpu-ns/VM")
			b.ReportMetric(float64(helmCPU.Nanoseconds())/vmRuns, "helm-cpu-ns/VM")
			b.ReportMetric(float64(renderRSS)/(1<<20), "render-maxrss-MiB")
			b.ReportMetric(float64(helmRSS)/(1<<20), "helm-maxrss-MiB")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// helmInputs returns n VMs as one stream, and the chart's values for them.
func helmInputs(b *testing.B, doc string, n int) (vms, values []byte) {
	doc = strings.Replace(doc, "spec:\n", "spec:\n  cloudInit:\n    userData:\n      hostname: test-vm\n"+
		"      ssh_authorized_keys:\n      - ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyOnly admin@example\n", 1)
	var stream bytes.Buffer
	var items []map[string]any
	for i := range n {
		d := strings.ReplaceAll(doc, "test-vm", fmt.Sprintf("vm-%d", i))
		stream.WriteString("---\n" + d)
		js, err := manifest.YAMLToJSON([]byte(d))
		require.NoError(b, err)
		vm, err := v1.DecodeJSON(js)
		require.NoError(b, err)
		objs, problems, _ := render.FromJSON(js, render.StreamOptions{Options: render.Options{ConfigAccess: true}})
		require.Empty(b, problems)
		items = append(items, helmValues(b, vm, objs))
	}
	values, err := manifest.Marshal(map[string]any{"vms": items})
	require.NoError(b, err)
	return stream.Bytes(), values
}

// helmValues are one VM's values: its own fields, and what render computes.
func helmValues(b *testing.B, vm *v1.VirtualMachine, objs *render.Objects) map[string]any {
	var runner map[string]any
	require.NoError(b, yaml.Unmarshal([]byte(objs.ConfigMap.Data["config.yaml"]), &runner))
	meta := string(objs.Secret.Data["meta-data"])
	instanceID, _, _ := strings.Cut(strings.TrimPrefix(meta, "instance-id: "), "\n")
	var disks []map[string]any
	for _, d := range vm.Spec.VM.Disks {
		if d.VolumeClaimTemplate == nil {
			continue
		}
		disks = append(disks, map[string]any{"name": d.VolumeClaimTemplate.Metadata.Name + "-disk", "spec": d.VolumeClaimTemplate.Spec})
	}
	sts := objs.StatefulSet
	pod := &sts.Spec.Template
	requests := pod.Spec.Containers[0].Resources.Requests
	return map[string]any{
		"name": vm.Name, "namespace": vm.Namespace, "userData": vm.Spec.CloudInit.UserData, "disks": disks,
		"runner": runner["/Runner"], "instanceID": instanceID,
		"configMapHash":   objs.ConfigMap.Annotations[render.AnnotationHash],
		"secretHash":      objs.Secret.Annotations[render.AnnotationHash],
		"statefulSetHash": sts.Annotations[render.AnnotationHash],
		"restartHash":     pod.Annotations[render.AnnotationRestartHash],
		"accountHash":     objs.ServiceAccount.Annotations[render.AnnotationHash],
		"roleHash":        objs.Role.Annotations[render.AnnotationHash],
		"roleBindingHash": objs.RoleBinding.Annotations[render.AnnotationHash],
		"replicas":        *sts.Spec.Replicas, "image": pod.Spec.Containers[0].Image,
		"cpu": requests.Cpu().String(), "memory": requests.Memory().String(),
	}
}

// run runs a command through testdata/rusage, with its output to out or
// returned, and returns its CPU time (user and system) and peak RSS in
// bytes.
func run(b *testing.B, argv, env []string, out io.Writer) (output []byte, cpu time.Duration, rss int64) {
	usage, err := os.CreateTemp(b.TempDir(), "rusage")
	require.NoError(b, err)
	defer usage.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.ExtraFiles = []*os.File{usage}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if out != nil {
		cmd.Stdout = out
	}
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, stderr.Bytes())
	}
	var user, sys, maxrssKiB int64
	_, err = fmt.Fscan(io.NewSectionReader(usage, 0, 1<<10), &user, &sys, &maxrssKiB)
	require.NoError(b, err, "rusage's report")
	return stdout.Bytes(), time.Duration(user + sys), maxrssKiB << 10
}

func objectKey(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	return fmt.Sprint(obj["kind"], "/", meta["namespace"], "/", meta["name"])
}

// readObjects reads a stream into generic objects, Secrets' data decoded.
func readObjects(b *testing.B, stream []byte) []map[string]any {
	r := manifest.NewReader(bytes.NewReader(stream))
	var objs []map[string]any
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return objs
		}
		require.NoError(b, err)
		var obj map[string]any
		require.NoError(b, json.Unmarshal(d.JSON, &obj))
		if data, ok := obj["data"].(map[string]any); ok && d.Kind == "Secret" {
			for k, v := range data {
				plain, err := base64.StdEncoding.DecodeString(v.(string))
				require.NoError(b, err)
				data[k] = string(plain)
			}
		}
		objs = append(objs, obj)
	}
}
