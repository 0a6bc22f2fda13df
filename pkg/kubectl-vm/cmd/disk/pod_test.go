package disk

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	psapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/helperpod"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/golden"
)

// Golden files: testdata/uploader-pod.yaml, testdata/claims.yaml;
// rewrite them with "go test ./pkg/kubectl-vm/cmd/disk -update".

// placedVM is a VM placed on a node by every means a pod has, with a
// named and an unnamed disk.
const placedVM = `
apiVersion: vmoperator.jdrupes.org/v1
kind: VirtualMachine
metadata:
  name: web
  namespace: vms
spec:
  image:
    source: registry.example/vmop/vm-runner:custom
    pullPolicy: Always
  nodeName: node-1
  nodeSelector:
    vmop.example.com/kvm: "true"
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: topology.kubernetes.io/zone
            operator: In
            values: [zone-a]
  vm:
    disks:
    - volumeClaimTemplate:
        metadata:
          name: root
          labels:
            example.com/backup: daily
        spec:
          storageClassName: local-block
          resources:
            requests:
              storage: 20Gi
    - volumeClaimTemplate:
        spec:
          resources:
            requests:
              storage: 1Gi
`

func renderVM(t *testing.T, manifestYAML string) *render.Objects {
	t.Helper()
	var vm v1.VirtualMachine
	require.NoError(t, yaml.UnmarshalStrict([]byte(manifestYAML), &vm))
	objs, err := render.Render(&vm, render.Options{})
	require.NoError(t, err)
	return objs
}

// TestUploaderPod: the pod of an upload to the root disk, and the
// command that runs in it.
func TestUploaderPod(t *testing.T) {
	sts := renderVM(t, placedVM).StatefulSet
	tg, err := resolveDisk(sts, "root")
	require.NoError(t, err)
	pod, err := uploaderPod(tg)
	require.NoError(t, err)
	out, err := manifest.Marshal(pod)
	require.NoError(t, err)
	golden.Assert(t, filepath.Join("testdata", "uploader-pod.yaml"), out)

	tmpl := sts.Spec.Template.Spec
	require.Equal(t, tmpl.Containers[0].Image, pod.Spec.Containers[0].Image, "the VM's runner image")
	require.Equal(t, tmpl.NodeName, pod.Spec.NodeName)
	require.Equal(t, tmpl.NodeSelector, pod.Spec.NodeSelector)
	require.Equal(t, tmpl.Affinity, pod.Spec.Affinity)
	require.Equal(t, "root-disk-web-0", pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	require.Equal(t, "runner-data-web-0", pod.Spec.Volumes[1].PersistentVolumeClaim.ClaimName)

	// As a VM's pod, it passes Pod Security restricted, and it asks the
	// node agent for the block device; but not for the agent's devices.
	ev, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	require.NoError(t, err)
	for _, r := range ev.EvaluatePod(psapi.LevelVersion{Level: psapi.LevelRestricted, Version: psapi.LatestVersion()}, &pod.ObjectMeta, &pod.Spec) {
		require.True(t, r.Allowed, "%s: %s", r.ForbiddenReason, r.ForbiddenDetail)
	}
	c := pod.Spec.Containers[0]
	require.Contains(t, c.Env, corev1.EnvVar{Name: nodeagent.EnvSocket, Value: nodeagent.Dir + "/" + nodeagent.Socket})
	require.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: nodeagent.Volume, MountPath: nodeagent.Dir})
	require.Empty(t, c.Resources)

	require.Equal(t, []string{"vm-runner", "disk", "receive", "--disk", "root-disk", "--device", DevicePath,
		"--records", "/var/local/vm-data/disk-imports", "--scratch", "/var/local/vmop-import", "--size", "1234", "--name", "root.qcow2", "--force"},
		receiveCommand(tg, "root.qcow2", 1234, true))
}

// TestResolveDisk: --disk is the disk's name in the VM or its volume's.
func TestResolveDisk(t *testing.T) {
	sts := renderVM(t, placedVM).StatefulSet
	for given, want := range map[string]string{"root": "root-disk", "root-disk": "root-disk", "disk-1": "disk-1"} {
		tg, err := resolveDisk(sts, given)
		require.NoError(t, err, given)
		require.Equal(t, want, tg.disk, given)
		require.Equal(t, want+"-web-0", tg.claim, given)
	}
	for given, want := range map[string]string{
		"data":        `--disk "data": vm vms/web has no such disk; its disks: root-disk, disk-1`,
		"runner-data": `--disk "runner-data": vm vms/web has no such disk; its disks: root-disk, disk-1`,
		"disk-1-disk": `--disk "disk-1-disk": vm vms/web has no such disk; its disks: root-disk, disk-1`,
	} {
		_, err := resolveDisk(sts, given)
		require.EqualError(t, err, want)
	}
}

// TestUploaderPodFilesystem: a disk on a Filesystem claim is its image
// file, which the receiver makes at the claim's size.
func TestUploaderPodFilesystem(t *testing.T) {
	sts := renderVM(t, strings.Replace(placedVM, "storageClassName: local-block", "volumeMode: Filesystem", 1)).StatefulSet
	tg, err := resolveDisk(sts, "root")
	require.NoError(t, err)
	require.EqualValues(t, 20<<30, tg.claimSize)
	pod, err := uploaderPod(tg)
	require.NoError(t, err)
	c := pod.Spec.Containers[0]
	require.Empty(t, c.VolumeDevices)
	require.Contains(t, c.VolumeMounts, corev1.VolumeMount{Name: volumeDisk, MountPath: "/var/local/vmop-disks/vm-disk"})
	require.Equal(t, []string{"vm-runner", "disk", "receive", "--disk", "root-disk", "--device", "/var/local/vmop-disks/vm-disk/disk.img",
		"--records", "/var/local/vm-data/disk-imports", "--scratch", "/var/local/vmop-import", "--size", "1234", "--name", "root.qcow2",
		"--claim-size", "21474836480"},
		receiveCommand(tg, "root.qcow2", 1234, false))
}

// TestNewClaim: the claims are those the StatefulSet controller would
// make for the VM's pod (its getPersistentVolumeClaims): the template's
// name with the pod's, its labels with the selector's, its spec.
func TestNewClaim(t *testing.T) {
	sts := renderVM(t, placedVM).StatefulSet
	var out []byte
	for _, name := range []string{"root-disk", render.VolumeRunnerData} {
		claim := helperpod.NewClaim(sts, name)
		require.Equal(t, name+"-web-0", claim.Name)
		require.Equal(t, "vms", claim.Namespace)
		require.Equal(t, helperpod.Template(sts, name).Spec, claim.Spec)
		for k, v := range sts.Spec.Selector.MatchLabels {
			require.Equal(t, v, claim.Labels[k])
		}
		b, err := manifest.Marshal(claim)
		require.NoError(t, err)
		out = append(append(out, "---\n"...), b...)
	}
	require.Equal(t, "daily", helperpod.NewClaim(sts, "root-disk").Labels["example.com/backup"])
	require.NotContains(t, helperpod.Template(sts, "root-disk").Labels, "x", "the template is not changed")
	golden.Assert(t, filepath.Join("testdata", "claims.yaml"), out)
}
