package serving

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/inference"
)

// ApplyRevision makes the revision's Deployment match its spec with
// req.Replicas replicas, creating it when missing (and the project's
// namespace). It is idempotent: the name is derived from (project,
// endpoint, revision), and an apply that changes nothing writes nothing.
// An object of that name that Atelier does not manage, or that belongs to
// another endpoint or revision, is left alone: InvalidStep.
//
// The spec is validated as the inference package validates it; a spec it
// rejects, or a Deployment the API server rejects, is a non-retryable
// InvalidStep whose message names the field.
func (s *Serving) ApplyRevision(ctx context.Context, req activities.ApplyServingRevisionRequest) (activities.ServingObjectResult, error) {
	if err := checkRef(req.ServingRevisionRef); err != nil {
		return activities.ServingObjectResult{}, err
	}
	if req.Replicas < 0 {
		return activities.ServingObjectResult{}, framework.Invalid("replicas must not be negative, got %d", req.Replicas)
	}
	if err := inference.Validate(req.Spec); err != nil {
		return activities.ServingObjectResult{}, framework.Invalid("revision %d of endpoint %s: %v", req.Revision, req.Endpoint, err)
	}
	ns, err := s.namespace(req.Project)
	if err != nil {
		return activities.ServingObjectResult{}, err
	}
	spec := inference.WithDefaults(req.Spec)
	fetch, secret, err := s.revisionSecret(ctx, ns, req.Project, req.Endpoint, req.Revision, spec)
	if err != nil {
		return activities.ServingObjectResult{}, err
	}
	if fetch != nil {
		spec.Model = spec.Model.Located(ModelDir) // fetched there by the init container
	}
	desired, err := buildDeployment(ns, req.Project, req.Endpoint, req.Revision, spec, req.Replicas)
	if err != nil {
		return activities.ServingObjectResult{}, framework.Invalid("revision %d of endpoint %s: %v", req.Revision, req.Endpoint, err)
	}
	if fetch != nil {
		if err := withModel(&desired.Spec.Template, fetch); err != nil {
			return activities.ServingObjectResult{}, err
		}
	}
	if secret != nil {
		withSecretEnv(&desired.Spec.Template, spec.Secrets, secret.Name)
		desired.Annotations[AnnotationTemplateHash] = templateHash(desired.Spec.Template)
	}
	if d := s.podPolicy.Defaults; d != nil {
		if err := framework.ApplyPodDefaults(&desired.Spec.Template, ContainerName, d); err != nil {
			return activities.ServingObjectResult{}, err
		}
		// The hash covers what the pods get: a change of the defaults
		// rolls the revision's pods like any template change.
		desired.Annotations[AnnotationTemplateHash] = templateHash(desired.Spec.Template)
	}
	if err := s.podPolicy.CheckPod(&desired.Spec.Template.Spec); err != nil {
		return activities.ServingObjectResult{}, err
	}
	if secret != nil {
		// The Secret before the Deployment: a pod must not start without
		// it.
		if err := s.ensureRevisionSecret(ctx, secret, req.Project); err != nil {
			return activities.ServingObjectResult{}, err
		}
	}
	live, changed, err := s.apply(ctx, s.res.Deployments, desired, mergeDeployment, req.Project)
	if err != nil {
		var app *temporal.ApplicationError
		if secret != nil && errors.As(err, &app) && app.NonRetryable() {
			// Refused for good (another's object of that name): no
			// ownerless Secret of values stays behind.
			_, _ = s.deleteRevisionSecret(context.WithoutCancel(ctx), ns, desired.Name, desired.Labels)
		}
		return activities.ServingObjectResult{}, err
	}
	if secret != nil {
		if err := s.ownRevisionSecret(ctx, secret, live.(*appsv1.Deployment)); err != nil {
			return activities.ServingObjectResult{}, err
		}
	}
	return activities.ServingObjectResult{Namespace: ns, Object: objectRef(s.res.Deployments, desired.Name), Changed: changed}, nil
}

// ScaleRevision sets the revision's replica count, touching nothing else.
// It exists beside ApplyRevision so that the autoscaler's frequent calls
// carry no spec. Scaling a missing Deployment to 0 succeeds; to more is an
// InvalidStep (apply the revision first).
func (s *Serving) ScaleRevision(ctx context.Context, req activities.ScaleServingRevisionRequest) (activities.ServingObjectResult, error) {
	if err := checkRef(req.ServingRevisionRef); err != nil {
		return activities.ServingObjectResult{}, err
	}
	if req.Replicas < 0 {
		return activities.ServingObjectResult{}, framework.Invalid("replicas must not be negative, got %d", req.Replicas)
	}
	ns, err := s.namespace(req.Project)
	if err != nil {
		return activities.ServingObjectResult{}, err
	}
	name := RevisionName(req.Project, req.Endpoint, req.Revision)
	want := RevisionLabels(req.Project, req.Endpoint, req.Revision)
	res := activities.ServingObjectResult{Namespace: ns, Object: objectRef(s.res.Deployments, name)}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := s.res.Deployments.Get(ctx, ns, name)
		if apierrors.IsNotFound(err) {
			if req.Replicas == 0 {
				return nil
			}
			return framework.Invalid("cannot scale revision %d of endpoint %s to %d: its Deployment %s/%s does not exist (apply the revision first)",
				req.Revision, req.Endpoint, req.Replicas, ns, name)
		}
		if err != nil {
			return framework.WrapAPI(err, "get Deployment %s/%s", ns, name)
		}
		if err := framework.CheckAdoptable(s.res.Deployments, obj, want); err != nil {
			return err
		}
		d := obj.(*appsv1.Deployment)
		if ptr.Deref(d.Spec.Replicas, 1) == int32(req.Replicas) {
			return nil
		}
		d.Spec.Replicas = ptr.To(int32(req.Replicas))
		if _, err := s.res.Deployments.Update(ctx, d); err != nil {
			if apierrors.IsConflict(err) {
				return err
			}
			return framework.WrapAPI(err, "scale Deployment %s/%s", ns, name)
		}
		res.Changed = true
		return nil
	})
	if err != nil {
		return activities.ServingObjectResult{}, err
	}
	return res, nil
}

// DeleteRevision deletes the revision's Deployment (its pods go with it,
// in the background) and its Service. Missing objects are success; objects
// of that name that are not this revision's are left alone (InvalidStep).
// The workflow takes the revision out of the traffic weights first, and
// waits for its pods to be gone (ObserveRevision's Terminating) when it
// needs their GPUs.
func (s *Serving) DeleteRevision(ctx context.Context, req activities.DeleteServingRevisionRequest) (activities.ServingDeleteResult, error) {
	if err := checkRef(req); err != nil {
		return activities.ServingDeleteResult{}, err
	}
	ns, err := s.namespace(req.Project)
	if err != nil {
		return activities.ServingDeleteResult{}, err
	}
	name := RevisionName(req.Project, req.Endpoint, req.Revision)
	want := RevisionLabels(req.Project, req.Endpoint, req.Revision)
	var out activities.ServingDeleteResult
	for _, r := range []framework.Resource{s.res.Services, s.res.Deployments} {
		deleted, err := deleteOwned(ctx, r, ns, name, want)
		if err != nil {
			return out, err
		}
		if deleted {
			out.Deleted = append(out.Deleted, objectRef(r, name))
		}
	}
	s.clusterIPs.Delete(ns + "/" + name)
	if deleted, err := s.deleteRevisionSecret(ctx, ns, name, want); err != nil {
		return out, err
	} else if deleted {
		out.Deleted = append(out.Deleted, "secret/"+revisionSecretName(name))
	}
	return out, nil
}

// DeleteEndpoint deletes every object of the endpoint: its HTTPRoute,
// Services and Deployments (found by label, so revisions the caller no
// longer remembers go too). Missing objects are success.
func (s *Serving) DeleteEndpoint(ctx context.Context, req activities.DeleteServingEndpointRequest) (activities.ServingDeleteResult, error) {
	if err := checkEndpoint(req.Project, req.Endpoint); err != nil {
		return activities.ServingDeleteResult{}, err
	}
	ns, err := s.namespace(req.Project)
	if err != nil {
		return activities.ServingDeleteResult{}, err
	}
	selector := selectorString(EndpointLabels(req.Project, req.Endpoint))
	resources := []framework.Resource{s.res.Services, s.res.Deployments}
	if s.res.Routes != nil {
		served, err := s.routesServed(ctx)
		if err != nil {
			return activities.ServingDeleteResult{}, err
		}
		if served {
			resources = append([]framework.Resource{*s.res.Routes}, resources...)
		}
	}
	var out activities.ServingDeleteResult
	for _, r := range resources {
		list, err := r.List(ctx, ns, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return out, framework.WrapAPI(err, "list %ss of endpoint %s", r.Kind(), req.Endpoint)
		}
		objs, err := listItems(list)
		if err != nil {
			return out, err
		}
		for _, o := range objs {
			deleted, err := deleteObject(ctx, r, o)
			if err != nil {
				return out, err
			}
			if deleted {
				out.Deleted = append(out.Deleted, objectRef(r, o.GetName()))
			}
			s.clusterIPs.Delete(ns + "/" + o.GetName())
		}
	}
	// Revisions' Secrets (their owner references delete them with their
	// Deployments too; this covers one whose Deployment was never made).
	secrets, err := s.clients.Kube.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return out, framework.WrapAPI(err, "list Secrets of endpoint %s", req.Endpoint)
	}
	for _, sec := range secrets.Items {
		err := s.clients.Kube.CoreV1().Secrets(ns).Delete(ctx, sec.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return out, framework.WrapAPI(err, "delete Secret %s/%s", ns, sec.Name)
		}
		out.Deleted = append(out.Deleted, "secret/"+sec.Name)
	}
	return out, nil
}

// deleteOwned deletes ns/name if it carries exactly the identity want.
func deleteOwned(ctx context.Context, r framework.Resource, ns, name string, want map[string]string) (bool, error) {
	obj, err := r.Get(ctx, ns, name)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, framework.WrapAPI(err, "get %s %s/%s", r.Kind(), ns, name)
	}
	if err := framework.CheckAdoptable(r, obj, want); err != nil {
		return false, err
	}
	return deleteObject(ctx, r, obj)
}

// deleteObject deletes obj, only if it is still the object that was read
// (UID precondition: a same-named object created since is not ours to
// delete). Dependents (ReplicaSets, pods) are deleted in the background.
func deleteObject(ctx context.Context, r framework.Resource, obj framework.Object) (bool, error) {
	uid := obj.GetUID()
	err := r.Delete(ctx, obj.GetNamespace(), obj.GetName(), metav1.DeleteOptions{
		Preconditions:     &metav1.Preconditions{UID: &uid},
		PropagationPolicy: ptr.To(metav1.DeletePropagationBackground),
	})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Gone, or replaced by another object since it was read.
		return false, nil
	}
	return false, framework.WrapAPI(err, "delete %s %s/%s", r.Kind(), obj.GetNamespace(), obj.GetName())
}

// listItems returns the objects of a typed list.
func listItems(list runtime.Object) ([]framework.Object, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]framework.Object, 0, len(items))
	for _, it := range items {
		o, ok := it.(framework.Object)
		if !ok {
			return nil, fmt.Errorf("list item %T is not an object", it)
		}
		out = append(out, o)
	}
	return out, nil
}
