package install_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/vmop/vmop/pkg/install"
	"github.com/vmop/vmop/pkg/vm-runner/reporter"
	"github.com/vmop/vmop/test/harness/testcluster"
)

const (
	operatorUser = "system:serviceaccount:vmop-system:vm-operator"
	nodeUser     = "system:serviceaccount:vmop-system:vm-node"
	vmNamespace  = "vms"
	runnerUser   = "system:serviceaccount:" + vmNamespace + ":vm-runner"
)

var (
	vmGVR  = schema.GroupVersionResource{Group: "vmoperator.jdrupes.org", Version: "v1", Resource: "vms"}
	stsGVR = appsv1.SchemeGroupVersion.WithResource("statefulsets")
)

// TestOnAPIServer installs into a real kube-apiserver and checks that the
// RBAC is least privilege and that the admission policy keeps a runner to
// its own VM. One cluster serves all subtests.
func TestOnAPIServer(t *testing.T) {
	s := newServer(t)
	ctx := t.Context()
	cs := s.Client()
	objs := s.install(t, install.Options{})
	require.Equal(t, len(objs), strings.Count(s.out.String(), " serverside-applied\n"), s.out.String())

	// The operator creates the runner's identity in a VM namespace; doing it
	// as the operator shows that it may.
	asOperator := impersonate(t, s.Config, operatorUser)
	sa, rb := install.RunnerAccess(vmNamespace)
	_, err := asOperator.CoreV1().ServiceAccounts(vmNamespace).Create(ctx, sa, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = asOperator.RbacV1().RoleBindings(vmNamespace).Create(ctx, rb, metav1.CreateOptions{})
	require.NoError(t, err)

	t.Run("install --wait says why it waits", func(t *testing.T) { testWaitSaysWhy(t, cs, s.cluster, s.out) })

	t.Run("operator rights", func(t *testing.T) {
		for _, a := range []struct {
			allowed bool
			attrs   authorizationv1.ResourceAttributes
		}{
			{true, ra("list", "vmoperator.jdrupes.org", "vms", "", "any")},
			{true, ra("watch", "vmoperator.jdrupes.org", "vms", "", "any")},
			{true, ra("patch", "vmoperator.jdrupes.org", "vms", "status", "any")},
			{true, ra("create", "apps", "statefulsets", "", "any")},
			{true, ra("delete", "apps", "statefulsets", "", "any")},
			{true, ra("patch", "", "configmaps", "", "any")},
			{true, ra("create", "", "secrets", "", "any")},
			{true, ra("get", "", "secrets", "", "kube-system")}, // cluster-wide by design
			{true, ra("delete", "", "services", "", "any")},
			{true, ra("watch", "policy", "poddisruptionbudgets", "", "any")},
			{true, ra("delete", "policy", "poddisruptionbudgets", "", "any")},
			{true, ra("watch", "", "pods", "", "any")},
			{true, ra("patch", "", "pods", "", "any")}, // the annotation that makes the kubelet refresh a pod's config
			{true, ra("create", "", "events", "", "any")},
			{true, ra("patch", "events.k8s.io", "events", "", "any")},
			{true, ra("create", "", "serviceaccounts", "", "any")},
			{true, ra("patch", "rbac.authorization.k8s.io", "rolebindings", "", "any")},
			{true, raNamed("bind", "rbac.authorization.k8s.io", "clusterroles", "vm-runner")},
			{true, ra("update", "coordination.k8s.io", "leases", "", "vmop-system")},

			{false, ra("update", "vmoperator.jdrupes.org", "vms", "", "any")},
			{false, ra("patch", "vmoperator.jdrupes.org", "vms", "", "any")},
			{false, ra("delete", "vmoperator.jdrupes.org", "vms", "", "any")},
			{false, ra("delete", "", "persistentvolumeclaims", "", "any")},
			{false, ra("create", "", "persistentvolumeclaims", "", "any")},
			{false, ra("create", "", "pods", "", "any")},
			{false, ra("delete", "", "pods", "", "any")},
			{false, ra("create", "", "pods", "exec", "any")},
			{false, ra("delete", "", "namespaces", "", "")},
			{false, ra("get", "", "nodes", "", "")},
			{false, raNamed("bind", "rbac.authorization.k8s.io", "clusterroles", "cluster-admin")},
			{false, raNamed("escalate", "rbac.authorization.k8s.io", "clusterroles", "vm-runner")},
			{false, ra("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "")},
			{false, ra("delete", "rbac.authorization.k8s.io", "rolebindings", "", "any")},
			{false, ra("update", "coordination.k8s.io", "leases", "", "default")},
		} {
			require.Equal(t, a.allowed, can(t, cs, operatorUser, a.attrs), "%s may %+v", operatorUser, a.attrs)
		}
	})

	t.Run("operator cannot escalate", func(t *testing.T) {
		// RBAC checks bindings for escalation when they are created, beyond
		// what a SubjectAccessReview shows.
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "escalate"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "vm-runner", Namespace: vmNamespace}},
		}
		_, err := asOperator.RbacV1().RoleBindings(vmNamespace).Create(ctx, rb, metav1.CreateOptions{})
		require.True(t, apierrors.IsForbidden(err), "binding cluster-admin: %v", err)
	})

	t.Run("runner rights", func(t *testing.T) {
		for _, a := range []struct {
			allowed bool
			attrs   authorizationv1.ResourceAttributes
		}{
			{true, ra("patch", "vmoperator.jdrupes.org", "vms", "", vmNamespace)},
			{true, ra("get", "vmoperator.jdrupes.org", "vms", "", vmNamespace)},
			{true, ra("patch", "vmoperator.jdrupes.org", "vms", "status", vmNamespace)},
			{true, ra("patch", "apps", "statefulsets", "scale", vmNamespace)},
			{true, ra("create", "events.k8s.io", "events", "", vmNamespace)},
			{true, ra("patch", "events.k8s.io", "events", "", vmNamespace)},

			{false, ra("list", "vmoperator.jdrupes.org", "vms", "", vmNamespace)},
			{false, ra("update", "vmoperator.jdrupes.org", "vms", "", vmNamespace)},
			{false, ra("delete", "vmoperator.jdrupes.org", "vms", "", vmNamespace)},
			{false, ra("patch", "vmoperator.jdrupes.org", "vms", "", "default")},
			{false, ra("get", "", "secrets", "", vmNamespace)},
			{false, ra("get", "", "configmaps", "", vmNamespace)},
			{false, ra("get", "apps", "statefulsets", "", vmNamespace)},
			{false, ra("patch", "apps", "statefulsets", "", vmNamespace)},
			{false, ra("get", "apps", "statefulsets", "scale", vmNamespace)},
			{false, ra("patch", "", "pods", "", vmNamespace)},
			{false, ra("create", "", "events", "", vmNamespace)},
			{false, ra("update", "events.k8s.io", "events", "", vmNamespace)},
			{false, ra("delete", "events.k8s.io", "events", "", vmNamespace)},
			{false, ra("list", "events.k8s.io", "events", "", vmNamespace)},
		} {
			require.Equal(t, a.allowed, can(t, cs, runnerUser, a.attrs), "%s may %+v", runnerUser, a.attrs)
		}
	})

	t.Run("node agent rights", func(t *testing.T) {
		for _, a := range []struct {
			allowed bool
			attrs   authorizationv1.ResourceAttributes
		}{
			{true, ra("get", "", "pods", "", "any")},
			{true, ra("list", "", "pods", "", "")},
			{true, ra("watch", "", "pods", "", "")},
			{true, ra("create", "", "events", "", "any")},
			{true, ra("patch", "", "events", "", "any")},
			{true, ra("create", "events.k8s.io", "events", "", "any")},
			{true, ra("patch", "events.k8s.io", "events", "", "any")},

			{false, ra("create", "", "pods", "", "any")},
			{false, ra("patch", "", "pods", "", "any")},
			{false, ra("delete", "", "pods", "", "any")},
			{false, ra("patch", "", "pods", "status", "any")},
			{false, ra("create", "", "pods", "exec", "any")},
			{false, ra("get", "", "secrets", "", "any")},
			{false, ra("get", "", "nodes", "", "")},
			{false, ra("patch", "", "nodes", "status", "")},
			{false, ra("list", "", "events", "", "any")},
			{false, ra("delete", "events.k8s.io", "events", "", "any")},
			{false, ra("get", "vmoperator.jdrupes.org", "vms", "", "any")},
		} {
			require.Equal(t, a.allowed, can(t, cs, nodeUser, a.attrs), "%s may %+v", nodeUser, a.attrs)
		}
	})

	t.Run("runner changes only its own VM", func(t *testing.T) {
		testRunnerOwnVM(t, s.Config, cs)
	})
}

// testRunnerOwnVM acts as the runner of vm-a, with a token bound to its
// pod vm-a-0 as the kubelet would mount it: it may change vm-a and its
// StatefulSet, not vm-b's.
func testRunnerOwnVM(t *testing.T, admin *rest.Config, cs kubernetes.Interface) {
	ctx := t.Context()
	dyn, err := dynamic.NewForConfig(admin)
	require.NoError(t, err)
	for _, name := range []string{"vm-a", "vm-b"} {
		vm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "vmoperator.jdrupes.org/v1",
			"kind":       "VirtualMachine",
			"metadata":   map[string]any{"name": name},
			"spec": map[string]any{
				"image": map[string]any{"source": "ghcr.io/vmop/vm-runner:v1"},
				"vm": map[string]any{
					"state":       "Running",
					"maximumCpus": int64(4),
					"currentCpus": int64(2),
					"display":     map[string]any{"spice": map[string]any{"port": int64(5910)}},
				},
			},
		}}
		_, err := dyn.Resource(vmGVR).Namespace(vmNamespace).Create(ctx, vm, metav1.CreateOptions{})
		require.NoError(t, err)
		_, err = cs.AppsV1().StatefulSets(vmNamespace).Create(ctx, statefulSet(name), metav1.CreateOptions{})
		require.NoError(t, err)
	}
	// No kubelet runs: the pod only needs to exist for the token to be
	// bound to it. Without a token controller, no token is mounted.
	pod, err := cs.CoreV1().Pods(vmNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "vm-a-0"},
		Spec: corev1.PodSpec{
			ServiceAccountName:           install.RunnerServiceAccount,
			AutomountServiceAccountToken: ptr.To(false),
			NodeName:                     "nowhere",
			Containers:                   []corev1.Container{{Name: "runner", Image: "runner"}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	token := func(bound *authenticationv1.BoundObjectReference) *rest.Config {
		tr, err := cs.CoreV1().ServiceAccounts(vmNamespace).CreateToken(ctx, install.RunnerServiceAccount,
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: bound}}, metav1.CreateOptions{})
		require.NoError(t, err)
		cfg := rest.AnonymousClientConfig(admin)
		cfg.BearerToken = tr.Status.Token
		return cfg
	}
	runner := token(&authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID})

	// What the policy relies on: the API server names the pod in the user's
	// extra.
	rcs, err := kubernetes.NewForConfig(runner)
	require.NoError(t, err)
	review, err := rcs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Equal(t, runnerUser, review.Status.UserInfo.Username)
	require.Equal(t, authenticationv1.ExtraValue{"vm-a-0"}, review.Status.UserInfo.Extra["authentication.kubernetes.io/pod-name"])

	type change struct {
		gvr         schema.GroupVersionResource
		pt          types.PatchType
		patch       string
		subresource string
	}
	changes := map[string]change{
		"stop": {vmGVR, types.MergePatchType, `{"spec":{"vm":{"state":"Stopped"}}}`, ""},
		"status": {vmGVR, types.ApplyPatchType,
			`{"apiVersion":"vmoperator.jdrupes.org/v1","kind":"VirtualMachine","metadata":{"name":"NAME"},"status":{"ram":"1Gi"}}`, "status"},
		"scale": {stsGVR, types.MergePatchType, `{"spec":{"replicas":0}}`, "scale"},
	}
	apply := func(cfg *rest.Config, name string, c change) error {
		d, err := dynamic.NewForConfig(cfg)
		require.NoError(t, err)
		opts := metav1.PatchOptions{FieldManager: "vm-runner"}
		if c.pt == types.ApplyPatchType {
			opts.Force = ptr.To(true)
		}
		_, err = d.Resource(c.gvr).Namespace(vmNamespace).Patch(ctx, name, c.pt,
			[]byte(strings.ReplaceAll(c.patch, "NAME", name)), opts, c.subresource)
		return err
	}
	unbound := token(nil)
	// The API server loads new policies in the background.
	require.Eventually(t, func() bool { return apierrors.IsForbidden(apply(unbound, "vm-a", changes["stop"])) },
		10*time.Second, 100*time.Millisecond, "the policy takes effect")
	for what, c := range changes {
		require.NoError(t, apply(runner, "vm-a", c), "%s of its own VM", what)

		err := apply(runner, "vm-b", c)
		require.True(t, apierrors.IsForbidden(err), "%s of another VM: %v", what, err)
		require.ErrorContains(t, err, "vm-runner-own-vm: a VM's runner (the pod <vm>-0) may change only its own VirtualMachine <vm> and StatefulSet <vm>")

		// A token that names no pod is no runner's.
		err = apply(unbound, "vm-a", c)
		require.True(t, apierrors.IsForbidden(err), "%s with a token of no pod: %v", what, err)
		require.ErrorContains(t, err, "vm-runner-own-vm")
	}
	vm, err := dyn.Resource(vmGVR).Namespace(vmNamespace).Get(ctx, "vm-a", metav1.GetOptions{})
	require.NoError(t, err)
	state, _, _ := unstructured.NestedString(vm.Object, "spec", "vm", "state")
	require.Equal(t, "Stopped", state)
	ram, _, _ := unstructured.NestedString(vm.Object, "status", "ram")
	require.Equal(t, "1Gi", ram)

	// Its own VM a runner may only stop: a qemu that a guest took over
	// must not send the next console elsewhere, change the image, expose
	// the VM, start it or scale it up.
	const onlyStop = "vm-runner-own-vm: a VM's runner may only set spec.vm.state to Stopped on its VirtualMachine, changing nothing else, and scale its StatefulSet to 0"
	vmPatch := func(pt types.PatchType, patch string) change { return change{vmGVR, pt, patch, ""} }
	for what, c := range map[string]change{
		"the display's server":     vmPatch(types.MergePatchType, `{"spec":{"vm":{"display":{"spice":{"server":"attacker.example"}}}}}`),
		"stop and display's proxy": vmPatch(types.MergePatchType, `{"spec":{"vm":{"state":"Stopped","display":{"spice":{"proxyUrl":"https://attacker.example"}}}}}`),
		"the image":                vmPatch(types.MergePatchType, `{"spec":{"image":{"source":"attacker.example/vm-runner:v1"}}}`),
		"a load balancer":          vmPatch(types.MergePatchType, `{"spec":{"loadBalancerService":{}}}`),
		"state Running":            vmPatch(types.MergePatchType, `{"spec":{"vm":{"state":"Running"}}}`),
		"stop and more CPUs":       vmPatch(types.MergePatchType, `{"spec":{"vm":{"state":"Stopped","currentCpus":4}}}`),
		"stop and no display":      vmPatch(types.JSONPatchType, `[{"op":"replace","path":"/spec/vm/state","value":"Stopped"},{"op":"remove","path":"/spec/vm/display"}]`),
		"no image":                 vmPatch(types.JSONPatchType, `[{"op":"remove","path":"/spec/image"}]`),
		"a label":                  vmPatch(types.MergePatchType, `{"metadata":{"labels":{"attacker":"yes"}}}`),
		"an annotation":            vmPatch(types.MergePatchType, `{"metadata":{"annotations":{"attacker":"yes"}}}`),
		"a finalizer":              vmPatch(types.MergePatchType, `{"metadata":{"finalizers":["attacker.example/keep"]}}`),
		"scale to 50":              {stsGVR, types.MergePatchType, `{"spec":{"replicas":50}}`, "scale"},
		"scale to 1":               {stsGVR, types.MergePatchType, `{"spec":{"replicas":1}}`, "scale"},
	} {
		err := apply(runner, "vm-a", c)
		require.True(t, apierrors.IsForbidden(err), "%s of its own VM: %v", what, err)
		require.ErrorContains(t, err, onlyStop, what)
	}
	after, err := dyn.Resource(vmGVR).Namespace(vmNamespace).Get(ctx, "vm-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, vm.Object["spec"], after.Object["spec"])
	require.Equal(t, vm.GetLabels(), after.GetLabels())
	require.Equal(t, vm.GetAnnotations(), after.GetAnnotations())
	require.Empty(t, after.GetFinalizers())
	sts, err := cs.AppsV1().StatefulSets(vmNamespace).Get(ctx, "vm-a", metav1.GetOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 0, *sts.Spec.Replicas)
	// Stopping a stopped VM changes nothing, and is fine.
	require.NoError(t, apply(runner, "vm-a", changes["stop"]))

	testRunnerOwnEvents(t, rcs, unbound)
}

// testRunnerOwnEvents: the runner of vm-a (client rcs) may report events
// regarding vm-a, its StatefulSet or its pod, as vm-runner from its pod;
// nothing else, and a token of no pod nothing at all.
func testRunnerOwnEvents(t *testing.T, rcs kubernetes.Interface, unbound *rest.Config) {
	ctx := t.Context()
	const denied = "vm-runner-own-vm: a VM's runner (the pod <vm>-0) may report events only regarding its own VirtualMachine <vm>, StatefulSet <vm> or pod"
	const posing = "vm-runner-own-vm: a VM's runner reports events as vmoperator.jdrupes.org/vm-runner, instance its pod"
	ref := func(apiVersion, kind, name string) corev1.ObjectReference {
		return corev1.ObjectReference{APIVersion: apiVersion, Kind: kind, Namespace: vmNamespace, Name: name}
	}
	event := func(change func(*eventsv1.Event)) *eventsv1.Event {
		e := &eventsv1.Event{
			ObjectMeta:          metav1.ObjectMeta{GenerateName: "vm-a-"},
			EventTime:           metav1.NowMicro(),
			ReportingController: reporter.ReportingController,
			ReportingInstance:   "vm-a-0",
			Action:              "Boot",
			Reason:              "Booted",
			Note:                "The guest agent answers",
			Type:                corev1.EventTypeNormal,
			Regarding:           ref("vmoperator.jdrupes.org/v1", "VirtualMachine", "vm-a"),
			Related:             ptr.To(ref("v1", "Pod", "vm-a-0")),
		}
		if change != nil {
			change(e)
		}
		return e
	}
	events := rcs.EventsV1().Events(vmNamespace)
	for what, change := range map[string]func(*eventsv1.Event){
		"its VirtualMachine": nil,
		"its StatefulSet":    func(e *eventsv1.Event) { e.Regarding = ref("apps/v1", "StatefulSet", "vm-a") },
		"its pod":            func(e *eventsv1.Event) { e.Regarding = ref("v1", "Pod", "vm-a-0") },
		"no related object":  func(e *eventsv1.Event) { e.Related = nil },
	} {
		_, err := events.Create(ctx, event(change), metav1.CreateOptions{})
		require.NoError(t, err, "an event regarding %s", what)
	}
	for what, c := range map[string]struct {
		change func(*eventsv1.Event)
		msg    string
	}{
		"another VM":                     {func(e *eventsv1.Event) { e.Regarding.Name = "vm-b" }, denied},
		"another VM's StatefulSet":       {func(e *eventsv1.Event) { e.Regarding = ref("apps/v1", "StatefulSet", "vm-b") }, denied},
		"another pod":                    {func(e *eventsv1.Event) { e.Regarding = ref("v1", "Pod", "vm-b-0") }, denied},
		"another kind named like it":     {func(e *eventsv1.Event) { e.Regarding = ref("v1", "Secret", "vm-a") }, denied},
		"another group's VirtualMachine": {func(e *eventsv1.Event) { e.Regarding.APIVersion = "kubevirt.io/v1" }, denied},
		"another namespace's VM":         {func(e *eventsv1.Event) { e.Regarding.Namespace = "default" }, denied},
		"a related other pod":            {func(e *eventsv1.Event) { e.Related.Name = "vm-b-0" }, denied},
		"the operator as reporter":       {func(e *eventsv1.Event) { e.ReportingController = "vmoperator.jdrupes.org/vm-operator" }, posing},
		"the kubelet as reporter":        {func(e *eventsv1.Event) { e.ReportingController = "kubelet" }, posing},
		"another instance":               {func(e *eventsv1.Event) { e.ReportingInstance = "vm-b-0" }, posing},
	} {
		_, err := events.Create(ctx, event(c.change), metav1.CreateOptions{})
		require.True(t, apierrors.IsForbidden(err), "an event with %s: %v", what, err)
		require.ErrorContains(t, err, c.msg, what)
	}

	// A repeat patches the series of its own event.
	own, err := events.Create(ctx, event(nil), metav1.CreateOptions{})
	require.NoError(t, err)
	series := []byte(`{"series":{"count":2,"lastObservedTime":"` + metav1.NowMicro().UTC().Format(metav1.RFC3339Micro) + `"}}`)
	patched, err := events.Patch(ctx, own.Name, types.MergePatchType, series, metav1.PatchOptions{})
	require.NoError(t, err, "the series of its own event")
	require.EqualValues(t, 2, patched.Series.Count)

	// A token of no pod is no runner's.
	ucs, err := kubernetes.NewForConfig(unbound)
	require.NoError(t, err)
	_, err = ucs.EventsV1().Events(vmNamespace).Create(ctx, event(nil), metav1.CreateOptions{})
	require.True(t, apierrors.IsForbidden(err), "an event with a token of no pod: %v", err)
	require.ErrorContains(t, err, "vm-runner-own-vm")
	_, err = ucs.EventsV1().Events(vmNamespace).Patch(ctx, own.Name, types.MergePatchType, series, metav1.PatchOptions{})
	require.True(t, apierrors.IsForbidden(err), "a series patch with a token of no pod: %v", err)
}

func statefulSet(name string) *appsv1.StatefulSet {
	labels := map[string]string{"app.kubernetes.io/instance": name}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.StatefulSetSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "runner", Image: "runner"}}},
			},
		},
	}
}

func ra(verb, group, resource, subresource, namespace string) authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Subresource: subresource, Namespace: namespace}
}

func raNamed(verb, group, resource, name string) authorizationv1.ResourceAttributes {
	return authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Name: name}
}

// server is a bare API server (no controller, no node, and vmop's CRD
// only once installed) and install's Cluster on it, which writes to out.
type server struct {
	*testcluster.Cluster
	cluster *install.Cluster
	out     *bytes.Buffer
}

func newServer(t *testing.T) *server {
	t.Helper()
	c := testcluster.New(t)
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	require.NoError(t, err)
	out := &bytes.Buffer{}
	cluster, err := install.Connect(c.Config, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), out)
	require.NoError(t, err)
	return &server{Cluster: c, cluster: cluster, out: out}
}

// install applies what opts install and creates the namespace
// vmNamespace for VMs; it returns the objects applied.
func (s *server) install(t *testing.T, opts install.Options) []*unstructured.Unstructured {
	t.Helper()
	objs, err := install.Objects(opts)
	require.NoError(t, err)
	require.NoError(t, s.cluster.Apply(t.Context(), objs))
	require.NoError(t, s.CreateNamespace(t.Context(), vmNamespace))
	return objs
}

// groups are the groups of user's requests: a service account's, or
// those of any user who logged in.
func groups(user string) []string {
	parts := strings.Split(user, ":")
	if len(parts) != 4 || parts[1] != "serviceaccount" {
		return []string{"system:authenticated"}
	}
	return []string{"system:serviceaccounts", "system:serviceaccounts:" + parts[2], "system:authenticated"}
}

func can(t *testing.T, cs kubernetes.Interface, user string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	r, err := cs.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: groups(user), ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return r.Status.Allowed
}

// impersonate is a client that acts as user.
func impersonate(t *testing.T, admin *rest.Config, user string) kubernetes.Interface {
	cfg := rest.CopyConfig(admin)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups(user)}
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return cs
}

// testWaitSaysWhy: no controller runs here, so the pods and events are
// made as the kubelet and the DaemonSet and ReplicaSet controllers make
// them, in their words. Each wait writes what its pods are stuck on as
// soon as it sees it, and ends with it.
func testWaitSaysWhy(t *testing.T, cs kubernetes.Interface, cluster *install.Cluster, out *bytes.Buffer) {
	ctx := t.Context()
	ns := install.DefaultNamespace
	ds, err := cs.AppsV1().DaemonSets(ns).Get(ctx, install.NodeAgentName, metav1.GetOptions{})
	require.NoError(t, err)
	dep, err := cs.AppsV1().Deployments(ns).Get(ctx, install.OperatorName, metav1.GetOptions{})
	require.NoError(t, err)
	pod := func(name string, labels map[string]string, account string) *corev1.Pod {
		p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.PodSpec{
				NodeName: "n1", ServiceAccountName: account, AutomountServiceAccountToken: ptr.To(false),
				Containers: []corev1.Container{{Name: "c", Image: "example.org/x"}},
			},
		}, metav1.CreateOptions{})
		require.NoError(t, err)
		return p
	}
	warn := func(name string, obj corev1.ObjectReference, reason, msg string) {
		_, err := cs.CoreV1().Events(ns).Create(ctx, &corev1.Event{
			ObjectMeta: metav1.ObjectMeta{Name: name}, InvolvedObject: obj, Type: corev1.EventTypeWarning,
			Reason: reason, Message: msg, LastTimestamp: metav1.Now(),
		}, metav1.CreateOptions{})
		require.NoError(t, err)
	}

	// The agent's pod cannot mount the kubelet's pod directory: the
	// kubelet keeps it elsewhere.
	agent := pod("vm-node-x1", ds.Spec.Selector.MatchLabels, install.NodeAgentName)
	mount := `MountVolume.SetUp failed for volume "kubelet-pods" : hostPath type check failed, /var/lib/kubelet/pods is not a directory, ` +
		`unable to determine its type: path "/var/lib/kubelet/pods" does not exist`
	warn("agent-mount", corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: agent.Name, UID: agent.UID}, "FailedMount", mount)
	warn("agent-create", corev1.ObjectReference{Kind: "DaemonSet", Namespace: ns, Name: install.NodeAgentName}, "FailedCreate",
		`pods "vm-node-x2" is forbidden: violates PodSecurity "baseline:latest": privileged`)
	ctxWait, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out.Reset()
	err = cluster.WaitNodeAgent(ctxWait, ns)
	require.Error(t, err)
	said := "pod vm-node-x1 on node n1: FailedMount: " + mount +
		"; if the nodes' kubelet keeps its files elsewhere (its --root-dir), give that directory: kubectl vm install --kubelet-root-dir DIR"
	require.Contains(t, out.String(), "daemonset.apps/vm-node waits: "+said+"\n")
	require.Contains(t, out.String(), `daemonset.apps/vm-node waits: daemonset vm-node cannot create its pod: pods "vm-node-x2" is forbidden`)
	require.Equal(t, 2, strings.Count(out.String(), "\n"), "each line once:\n%s", out)
	require.Contains(t, err.Error(), "daemonset.apps/vm-node is not ready yet (the DaemonSet controller has not counted its nodes), giving up (see --timeout): ")
	require.Contains(t, err.Error(), said)

	// The operator's image cannot be pulled.
	op := pod("vm-operator-x1", dep.Spec.Template.Labels, install.OperatorName)
	op.Status.Phase = corev1.PodPending
	op.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "operator", Image: "example.org/x", State: corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "example.org/x"`},
	}}}
	_, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, op, metav1.UpdateOptions{})
	require.NoError(t, err)
	// A Deployment's ReplicaSet reports the pods it cannot create.
	warn("operator-create", corev1.ObjectReference{Kind: "ReplicaSet", Namespace: ns, Name: install.OperatorName + "-5bcbbbbd5c"}, "FailedCreate",
		`pods "vm-operator-5bcbbbbd5c-x2" is forbidden: exceeded quota`)
	ctxWait, cancel = context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out.Reset()
	err = cluster.WaitAvailable(ctxWait, ns)
	require.ErrorContains(t, err, `deployment.apps/vm-operator is not available yet, giving up (see --timeout): `+
		`deployment vm-operator cannot create its pod: pods "vm-operator-5bcbbbbd5c-x2" is forbidden: exceeded quota; `+
		`pod vm-operator-x1 on node n1: container operator: ImagePullBackOff: Back-off pulling image "example.org/x"`)
	require.Contains(t, out.String(), "deployment.apps/vm-operator waits: pod vm-operator-x1 on node n1: container operator: ImagePullBackOff")
	require.Contains(t, out.String(), `deployment.apps/vm-operator waits: deployment vm-operator cannot create its pod: pods "vm-operator-5bcbbbbd5c-x2" is forbidden: exceeded quota`)
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, op.Name, metav1.DeleteOptions{}))
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(ctx, agent.Name, metav1.DeleteOptions{}))
}
