package framework

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// EnsureNamespace creates the project's namespace ns if it does not exist
// (labelled as Atelier's, with the project), and reports whether it did.
// A worker whose RBAC cannot read namespaces is assumed to use pre-created
// ones: creating the object in it then reports any real problem. Callers
// remember namespaces known to exist, so this runs once per namespace and
// worker.
func EnsureNamespace(ctx context.Context, kube kubernetes.Interface, ns, project string) (created bool, err error) {
	nsc := kube.CoreV1().Namespaces()
	_, err = nsc.Get(ctx, ns, metav1.GetOptions{})
	switch {
	case err == nil, apierrors.IsForbidden(err):
		return false, nil
	case apierrors.IsNotFound(err):
		_, err = nsc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			Name: ns,
			Labels: map[string]string{
				LabelManagedBy: ManagedByValue,
				LabelProject:   LabelValue(project),
			},
		}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return false, WrapAPI(err, "create namespace %s", ns)
		}
		return err == nil, nil
	default:
		return false, fmt.Errorf("get namespace %s: %w", ns, err)
	}
}
