package testcluster

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/yaml"

	"github.com/vmop/vmop/test/harness/eventually"
)

// InstallCRD creates or updates the CustomResourceDefinition in manifest
// (YAML or JSON) and waits until it is established and its resource is
// listed by discovery, so that clients can use it right away.
func (c *Cluster) InstallCRD(ctx context.Context, manifest []byte) error {
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(manifest, &crd); err != nil {
		return fmt.Errorf("decode CRD: %w", err)
	}
	client, err := apiextensionsclient.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	crds := client.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, &crd, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
		old, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		crd.ResourceVersion = old.ResourceVersion
		if _, err := crds.Update(ctx, &crd, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update CRD %s: %w", crd.Name, err)
		}
	} else if err != nil {
		return fmt.Errorf("create CRD %s: %w", crd.Name, err)
	}

	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	err = eventually.Until(ctx, 30*time.Second, func(ctx context.Context) error {
		got, err := crds.Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !established(got) {
			return fmt.Errorf("not established: %v", got.Status.Conditions)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gv := crd.Spec.Group + "/" + v.Name
			list, err := dc.ServerResourcesForGroupVersion(gv)
			if err != nil {
				return err
			}
			found := false
			for _, r := range list.APIResources {
				found = found || r.Name == crd.Spec.Names.Plural
			}
			if !found {
				return fmt.Errorf("%s not in discovery of %s", crd.Spec.Names.Plural, gv)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not ready within 30s: %w", crd.Name, err)
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}
