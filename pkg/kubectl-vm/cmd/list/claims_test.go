package list

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/vmop/vmop/pkg/api/nodeagent"
	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/kubectl-vm/vmclient"
	"github.com/vmop/vmop/pkg/render"
	"github.com/vmop/vmop/test/harness/gitopsvm"
)

// TestGitOpsClaims: in GitOps mode list names the claim that keeps a VM
// from starting, as kubectl vm status and the operator do, not the
// scheduler's Unschedulable.
func TestGitOpsClaims(t *testing.T) {
	objs := gitopsvm.Example(t)
	sts := objs.StatefulSet
	pod := gitopsvm.UnscheduledPod(sts, `0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found`)
	claim := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: render.ImageRepositoryClaim, Namespace: sts.Namespace},
		Status:     corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimPending},
	}
	kube := fake.NewClientset(pod, objs.ConfigMap, claim)
	var out bytes.Buffer
	o := &Options{
		client:    &vmclient.Client{Kube: kube, Namespace: sts.Namespace},
		IOStreams: genericiooptions.IOStreams{Out: &out},
		now:       func() time.Time { return time.Unix(0, 0) },
	}
	vm := &vmclient.VM{Namespace: sts.Namespace, Name: sts.Name, Mode: vmclient.ModeGitOps, StatefulSet: sts}
	views, err := o.views(t.Context(), []*vmclient.VM{vm})
	require.NoError(t, err)
	phase, msg := views[0].Phase()
	require.Equal(t, v1.ReasonNoDefaultStorageClass, phase)
	require.Contains(t, msg, "Claim "+render.ImageRepositoryClaim+" names no StorageClass")
	rows, err := o.rows(t.Context(), []*vmclient.VM{vm})
	require.NoError(t, err)
	require.NoError(t, o.printTable(rows, nil))
	require.Contains(t, out.String(), v1.ReasonNoDefaultStorageClass)
}

// TestGitOpsNodeAgentMissing: a VM pod that no node takes for want of the
// node agent's devices shows NodeAgentMissing, as in operator mode.
func TestGitOpsNodeAgentMissing(t *testing.T) {
	objs := gitopsvm.Example(t)
	sts := objs.StatefulSet
	pod := gitopsvm.UnscheduledPod(sts, "0/1 nodes are available: 1 Insufficient "+nodeagent.Resource+".")
	var out bytes.Buffer
	o := &Options{
		client:    &vmclient.Client{Kube: fake.NewClientset(pod, objs.ConfigMap), Namespace: sts.Namespace},
		IOStreams: genericiooptions.IOStreams{Out: &out},
		now:       func() time.Time { return time.Unix(0, 0) },
	}
	vm := &vmclient.VM{Namespace: sts.Namespace, Name: sts.Name, Mode: vmclient.ModeGitOps, StatefulSet: sts}
	views, err := o.views(t.Context(), []*vmclient.VM{vm})
	require.NoError(t, err)
	phase, _ := views[0].Phase()
	require.Equal(t, v1.ReasonNodeAgentMissing, phase)
	rows, err := o.rows(t.Context(), []*vmclient.VM{vm})
	require.NoError(t, err)
	require.NoError(t, o.printTable(rows, nil))
	require.Contains(t, out.String(), v1.ReasonNodeAgentMissing)
}
