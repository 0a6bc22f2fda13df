// Package install holds what "kubectl vm install" puts into a cluster: the
// VirtualMachine CRD, the vm-operator Deployment and its RBAC, the
// ClusterRole of the VMs' runner pods, the admission policy that keeps
// each runner to its own VM and the node agent vm-node (a DaemonSet and
// its RBAC). It also applies and deletes these objects.
//
// The manifests are YAML files under manifests/, written for the default
// namespace; Objects moves them to the namespace asked for.
package install

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/vmop/vmop/pkg/api/v1"
	"github.com/vmop/vmop/pkg/manifest"
	"github.com/vmop/vmop/pkg/version"
)

// manifests are applied in the order of their file names.
//
//go:embed manifests/*.yaml
var manifests embed.FS

const (
	// DefaultNamespace is where the operator runs unless told otherwise.
	DefaultNamespace = "vmop-system"
	// OperatorName names the operator's Deployment, its container, its
	// ServiceAccount and its ClusterRole(Binding).
	OperatorName = "vm-operator"

	// RunnerServiceAccount is the ServiceAccount that VM pods run as, one
	// per VM namespace.
	RunnerServiceAccount = "vm-runner"
	// RunnerClusterRole holds what a runner may do; the operator binds it
	// in each VM namespace with the RoleBinding RunnerRoleBinding.
	RunnerClusterRole = "vm-runner"
	// RunnerRoleBinding binds RunnerClusterRole to RunnerServiceAccount.
	RunnerRoleBinding = "vm-runner"
	// UserClusterRole holds what a person needs to run VMs with kubectl vm,
	// for administrators to bind per namespace.
	UserClusterRole = "vm-user"

	// NodeAgentName names the node agent's DaemonSet, its container, its
	// ServiceAccount and its ClusterRole(Binding).
	NodeAgentName = "vm-node"
	// DefaultKubeletRootDir is the kubelet's --root-dir unless a
	// distribution moves it (k0s, microk8s).
	DefaultKubeletRootDir = "/var/lib/kubelet"

	// componentLabel marks the node agent's objects with NodeAgentComponent.
	componentLabel = "app.kubernetes.io/component"
	// NodeAgentComponent is the value of app.kubernetes.io/component of the
	// node agent's objects and pods.
	NodeAgentComponent = "node-agent"
)

// labels mark every installed object, so that people and tools can find
// them.
var labels = map[string]string{
	"app.kubernetes.io/name":    OperatorName,
	"app.kubernetes.io/part-of": "vmop",
}

// Options choose where and what to install. The zero value installs the
// image of this build into DefaultNamespace.
type Options struct {
	// Namespace of the operator; empty means DefaultNamespace.
	Namespace string
	// Image of the operator; empty means this build's version of it from
	// ImageRegistry.
	Image string
	// ImageRegistry holds vmop's images (a mirror, for air-gapped
	// clusters); empty means version.Registry. The operator names its
	// runner image from there too, the node agent's image comes from there,
	// and the agent trusts the runner images of its repository.
	ImageRegistry string
	// RunnerRepositories are more image repositories (no tag or digest) of
	// runner images the node agent trusts, besides the one of
	// ImageRegistry: for VMs whose spec.image names a runner image from
	// another repository, such as a build of one's own.
	RunnerRepositories []string
	// KubeletRootDir is the kubelet's --root-dir on the nodes, through
	// whose pods/ the node agent reaches VM pods; empty means
	// DefaultKubeletRootDir. It must be absolute and clean.
	KubeletRootDir string
	// NodeAgentOnly installs only the node agent: the namespace, the
	// agent's ServiceAccount, ClusterRole(Binding) and DaemonSet. No CRD,
	// operator or admission policy: for clusters where VMs are rendered
	// (GitOps) and no operator runs.
	NodeAgentOnly bool
}

// ValidateKubeletRootDir checks a kubelet root directory: an absolute,
// clean path.
func ValidateKubeletRootDir(dir string) error {
	if !path.IsAbs(dir) || path.Clean(dir) != dir {
		return fmt.Errorf("%q is not an absolute, clean path, such as %s", dir, DefaultKubeletRootDir)
	}
	return nil
}

// ValidateRunnerRepository checks an image repository of runner images
// for the node agent to trust: a registry and a path, no tag or digest,
// such as "registry.example:5000/mirror/vm-runner".
func ValidateRunnerRepository(repo string) error {
	r, err := name.NewRepository(repo, name.StrictValidation)
	if err != nil || strings.Contains(repo, ":/") || slices.Contains(strings.Split(r.RepositoryStr(), "/"), "") {
		return fmt.Errorf("%q is not an image repository without tag or digest, such as registry.example:5000/vmop/vm-runner", repo)
	}
	return nil
}

// runnerRepositories are the repositories the node agent trusts: the one
// of opts.ImageRegistry, then opts.RunnerRepositories, each once (as the
// registry names it: docker.io/x is index.docker.io/x), the first spelling
// kept.
func runnerRepositories(opts Options) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range append([]string{version.Repository(opts.ImageRegistry, version.RunnerImage)}, opts.RunnerRepositories...) {
		key := r
		if n, err := name.NewRepository(r, name.StrictValidation); err == nil {
			key = n.Name()
		}
		if !seen[key] {
			seen[key] = true
			out = append(out, r)
		}
	}
	return out
}

// IsOwn tells whether o carries the labels of what install applies, e.g.
// a namespace that install created (rather than one it was given).
func IsOwn(o *unstructured.Unstructured) bool {
	for k, v := range labels {
		if o.GetLabels()[k] != v {
			return false
		}
	}
	return true
}

// IsNodeAgent tells whether o is one of the node agent's objects.
func IsNodeAgent(o *unstructured.Unstructured) bool {
	return o.GetLabels()[componentLabel] == NodeAgentComponent
}

// Objects returns the objects to install, in the order to apply them: the
// CRD first, then the namespace, RBAC and admission policy, the node
// agent, the Deployment last (once everything it needs is there). With
// opts.NodeAgentOnly, the namespace and the node agent only.
func Objects(opts Options) ([]*unstructured.Unstructured, error) {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.KubeletRootDir == "" {
		opts.KubeletRootDir = DefaultKubeletRootDir
	}
	if err := ValidateKubeletRootDir(opts.KubeletRootDir); err != nil {
		return nil, fmt.Errorf("kubelet root dir: %w", err)
	}
	if opts.Image == "" {
		opts.Image = version.Image(opts.ImageRegistry, version.OperatorImage)
	}
	if opts.ImageRegistry != "" {
		if err := version.ValidateRegistry(opts.ImageRegistry); err != nil {
			return nil, fmt.Errorf("image registry: %w", err)
		}
	}
	for _, r := range opts.RunnerRepositories {
		if err := ValidateRunnerRepository(r); err != nil {
			return nil, fmt.Errorf("runner repository: %w", err)
		}
	}
	if msgs := validation.IsDNS1123Label(opts.Namespace); len(msgs) > 0 {
		return nil, fmt.Errorf("namespace %q: %s", opts.Namespace, strings.Join(msgs, "; "))
	}
	if strings.ContainsFunc(opts.Image, func(r rune) bool { return r <= ' ' }) {
		return nil, fmt.Errorf("image %q: must not contain spaces or control characters", opts.Image)
	}
	objs, err := decode(v1.CRDManifest)
	if err != nil {
		return nil, fmt.Errorf("CRD: %w", err)
	}
	files, err := fs.Glob(manifests, "manifests/*.yaml") // sorted
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := manifests.ReadFile(f)
		if err != nil {
			return nil, err
		}
		more, err := decode(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		objs = append(objs, more...)
	}
	if opts.NodeAgentOnly {
		var agent []*unstructured.Unstructured
		for _, o := range objs {
			if o.GetKind() == "Namespace" || IsNodeAgent(o) {
				agent = append(agent, o)
			}
		}
		objs = agent
	}
	for _, o := range objs {
		if err := place(o, opts); err != nil {
			return nil, fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	return objs, nil
}

func decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	r := manifest.NewReader(bytes.NewReader(data))
	for {
		d, err := r.Next()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(d.JSON); err != nil {
			return nil, fmt.Errorf("document %d: %w", d.Index, err)
		}
		objs = append(objs, u)
	}
}

// place labels an object and moves what the manifests give for the
// default namespace and image to those of opts.
func place(o *unstructured.Unstructured, opts Options) error {
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range labels {
		l[k] = v
	}
	o.SetLabels(l)
	if o.GetNamespace() != "" {
		o.SetNamespace(opts.Namespace)
	}
	switch o.GetKind() {
	case "Namespace":
		o.SetName(opts.Namespace)
	case "RoleBinding", "ClusterRoleBinding":
		return forEach(o, func(s map[string]any) {
			if s["kind"] == "ServiceAccount" {
				s["namespace"] = opts.Namespace
			}
		}, "subjects")
	case "Deployment":
		return forEach(o, func(c map[string]any) {
			if c["name"] == OperatorName {
				c["image"] = opts.Image
				if opts.ImageRegistry != "" {
					c["args"] = append(c["args"].([]any), "--image-registry="+opts.ImageRegistry)
				}
			}
		}, "spec", "template", "spec", "containers")
	case "DaemonSet":
		return placeNodeAgent(o, opts)
	case "ValidatingAdmissionPolicy":
		if IsNodeAgent(o) {
			return forEach(o, func(v map[string]any) {
				if v["name"] == "repositories" {
					v["expression"] = celList(imageSpellings(runnerRepositories(opts)))
				}
			}, "spec", "variables")
		}
	}
	return nil
}

// imageSpellings are the ways an image reference may spell each of repos:
// Docker Hub's repositories have several (docker.io/library/x is x).
func imageSpellings(repos []string) []string {
	var out []string
	for _, r := range repos {
		out = append(out, r)
		n, err := name.NewRepository(r, name.StrictValidation)
		if err != nil || n.RegistryStr() != name.DefaultRegistry {
			continue
		}
		path := n.RepositoryStr()
		for _, s := range []string{path, "docker.io/" + path, name.DefaultRegistry + "/" + path, strings.TrimPrefix(path, "library/")} {
			if !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out
}

// celList is a CEL list of strings; ss need no escapes beyond Go's
// quoting of printable ASCII, which CEL reads the same.
func celList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// kubeletPodsVolume is the node agent's volume of the kubelet's pods/.
const kubeletPodsVolume = "kubelet-pods"

// placeNodeAgent gives the node agent's DaemonSet its image, the
// kubelet's root directory and the runner repositories it trusts, one
// --runner-repository each where the manifest has its one.
func placeNodeAgent(o *unstructured.Unstructured, opts Options) error {
	pods := path.Join(opts.KubeletRootDir, "pods")
	err := forEach(o, func(c map[string]any) {
		if c["name"] != NodeAgentName {
			return
		}
		c["image"] = version.Image(opts.ImageRegistry, version.NodeImage)
		args, _ := c["args"].([]any)
		placed := make([]any, 0, len(args))
		repos := false
		for _, a := range args {
			s, _ := a.(string)
			switch {
			case strings.HasPrefix(s, "--kubelet-root-dir="):
				placed = append(placed, "--kubelet-root-dir="+opts.KubeletRootDir)
			case strings.HasPrefix(s, "--runner-repository="):
				if !repos {
					repos = true
					for _, r := range runnerRepositories(opts) {
						placed = append(placed, "--runner-repository="+r)
					}
				}
			default:
				placed = append(placed, a)
			}
		}
		c["args"] = placed
		mounts, _ := c["volumeMounts"].([]any)
		for _, m := range mounts {
			if m, ok := m.(map[string]any); ok && m["name"] == kubeletPodsVolume {
				m["mountPath"] = pods
			}
		}
	}, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	return forEach(o, func(v map[string]any) {
		if v["name"] == kubeletPodsVolume {
			if hp, ok := v["hostPath"].(map[string]any); ok {
				hp["path"] = pods
			}
		}
	}, "spec", "template", "spec", "volumes")
}

// forEach calls f with each object of the list at path, to change it in
// place.
func forEach(o *unstructured.Unstructured, f func(map[string]any), path ...string) error {
	list, _, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if err != nil {
		return err
	}
	items, ok := list.([]any)
	if !ok {
		return fmt.Errorf("%s: not a list", strings.Join(path, "."))
	}
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: not a list of objects", strings.Join(path, "."))
		}
		f(m)
	}
	return nil
}

// NewClusterRole returns the ClusterRole name as installed
// (RunnerClusterRole, UserClusterRole), e.g. for tests that set up a runner
// or a user without the operator.
func NewClusterRole(name string) (*rbacv1.ClusterRole, error) {
	objs, err := Objects(Options{})
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GetKind() == "ClusterRole" && o.GetName() == name {
			var role rbacv1.ClusterRole
			err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &role)
			return &role, err
		}
	}
	return nil, errors.New("no ClusterRole " + name + " in the manifests")
}

// RunnerAccess returns what gives the runner pods of a VM namespace their
// rights: the ServiceAccount RunnerServiceAccount and the RoleBinding
// RunnerRoleBinding to the ClusterRole RunnerClusterRole.
func RunnerAccess(namespace string) (*corev1.ServiceAccount, *rbacv1.RoleBinding) {
	meta := metav1.ObjectMeta{Namespace: namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "vmop"}}
	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: *meta.DeepCopy(),
	}
	sa.Name = RunnerServiceAccount
	rb := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
		ObjectMeta: meta,
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RunnerClusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: RunnerServiceAccount, Namespace: namespace}},
	}
	rb.Name = RunnerRoleBinding
	return sa, rb
}
