package testcluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/vmop/vmop/test/harness/freeport"
)

// controllers are the kube-controller-manager controllers a cluster with
// Options.Controllers runs: what a StatefulSet needs to get its pods and
// claims, and what deleting namespaces and owners needs. Without a
// scheduler, node lifecycle or volume binding there are no surprises from
// them: pods stay where tests put them, claims stay Pending.
var controllers = []string{
	"statefulset",
	// Cascading deletes (background and foreground) along ownerReferences.
	"garbagecollector",
	"namespace",
	// The "default" ServiceAccount of new namespaces, and token Secrets.
	"serviceaccount",
	"serviceaccount-token",
	// The kube-root-ca.crt ConfigMap that service-account token volumes of
	// pods refer to.
	"root-ca-cert-publisher",
	// The API server puts a protection finalizer on every claim and volume;
	// these controllers remove it, else deleting a claim (or its
	// namespace) never ends.
	"pvc-protection",
	"pv-protection",
}

// startControllerManager runs kube-controller-manager as a member of
// system:masters and waits until it is healthy.
func (c *Cluster) startControllerManager(ctx context.Context, timeout time.Duration, more []string) error {
	ports, err := freeport.Ports(1)
	if err != nil {
		return err
	}
	p, err := c.StartProcess("kube-controller-manager", filepath.Join(c.BinDir, "kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig,
		// The only instance: waiting for a lease would only slow the start.
		"--leader-elect=false",
		"--controllers="+strings.Join(append(slices.Clone(controllers), more...), ","),
		// Signs legacy token Secrets, with the key the API server verifies.
		"--service-account-private-key-file="+c.saKey,
		// Goes into token Secrets and kube-root-ca.crt.
		"--root-ca-file="+c.caFile,
		// Its own port serves /healthz, which anyone may read, with a
		// certificate made in memory.
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		// The default 20 requests/s leave a thousand StatefulSets' status
		// updates queued for a minute: scale tests would measure that.
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
	)
	if err != nil {
		return err
	}
	c.ControllerManager = p
	return waitHTTP(ctx, p, timeout, insecureHTTP, "https://127.0.0.1:"+strconv.Itoa(ports[0])+"/healthz", "")
}

// CreateNamespace creates a namespace together with its "default"
// ServiceAccount. Pods are refused until that exists; the serviceaccount
// controller creates it too, but only a moment later, and only with
// Options.Controllers.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return c.ensureDefaultServiceAccount(ctx, name)
}

// ensureDefaultServiceAccount creates the "default" ServiceAccount of
// namespace unless it exists already (the controller may have been first).
func (c *Cluster) ensureDefaultServiceAccount(ctx context.Context, namespace string) error {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: namespace}}
	_, err := c.client.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service account %s/default: %w", namespace, err)
	}
	return nil
}
