package testcluster

import (
	"context"
	"fmt"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// WaitAllowed waits until the API server's authorizer lets user do every
// verb of rules in namespace ns. The RBAC authorizer learns of a new Role
// or RoleBinding through its informers, a moment after the create
// returns: a test that acts at once as the user may be refused.
func WaitAllowed(ctx context.Context, kube kubernetes.Interface, user, ns string, rules ...rbacv1.PolicyRule) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, r := range rules {
		for _, group := range r.APIGroups {
			for _, resource := range r.Resources {
				for _, verb := range r.Verbs {
					attrs := &authorizationv1.ResourceAttributes{Namespace: ns, Group: group, Resource: resource, Verb: verb}
					if err := waitAllowed(ctx, kube, user, attrs); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

func waitAllowed(ctx context.Context, kube kubernetes.Interface, user string, attrs *authorizationv1.ResourceAttributes) error {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: attrs}}
	for {
		got, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err == nil && got.Status.Allowed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("user %s may not %s %s.%s in %s after a wait (last review: %v): %w", user, attrs.Verb, attrs.Resource, attrs.Group, attrs.Namespace, err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
