package framework

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/retry"
)

// Merge copies what Atelier owns of desired into current (a fresh read of
// the live object, safe to modify) and reports whether anything changed.
// Fields other controllers own (status, defaults the API server filled in,
// replicas set by an autoscaler that is not Atelier) stay as they are.
type Merge func(current, desired Object) (changed bool)

// Apply makes the live object of a long-lived kind match desired: it
// creates it when missing, and otherwise merges desired into the live
// object and updates it when merge reports a change, retrying on write
// conflicts. It is idempotent, so activities may call it on every retry.
//
// An object of that name that Atelier does not manage (no
// atelier.dev/managed-by=atelier label) is never modified, nor is one that
// Atelier manages for something else (its identity labels differ from
// desired's: another endpoint or revision whose name happens to be the
// same): both are a non-retryable InvalidStep, like an unadoptable step
// object.
//
// changed reports whether Apply wrote anything.
func Apply(ctx context.Context, r Updater, desired Object, merge Merge) (obj Object, changed bool, err error) {
	ns, name := desired.GetNamespace(), desired.GetName()
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, gerr := r.Get(ctx, ns, name)
		if apierrors.IsNotFound(gerr) {
			created, cerr := r.Create(ctx, desired)
			switch {
			case cerr == nil:
				obj, changed = created, true
				return nil
			case apierrors.IsAlreadyExists(cerr):
				// Created concurrently: read it and merge, as a conflict.
				return apierrors.NewConflict(schema.GroupResource{Resource: r.Short()}, name, cerr)
			case IsMissingNamespace(cerr):
				return fmt.Errorf("create %s %s/%s: %w", r.Kind(), ns, name, ErrMissingNamespace)
			}
			return wrapAPI(cerr, "create %s %s/%s", r.Kind(), ns, name)
		}
		if gerr != nil {
			return wrapAPI(gerr, "get %s %s/%s", r.Kind(), ns, name)
		}
		if cur.GetLabels()[LabelManagedBy] != ManagedByValue {
			return Invalid("%s %s/%s exists and is not managed by Atelier (no %s=%s label): refusing to modify it",
				r.Kind(), ns, name, LabelManagedBy, ManagedByValue)
		}
		if !SameIdentity(cur.GetLabels(), desired.GetLabels()) {
			return Invalid("%s %s/%s exists and belongs to something else (it has %s; wanted %s): refusing to modify it",
				r.Kind(), ns, name, DescribeIdentity(cur.GetLabels()), DescribeIdentity(desired.GetLabels()))
		}
		if !merge(cur, desired) {
			obj, changed = cur, false
			return nil
		}
		updated, uerr := r.Update(ctx, cur)
		if uerr != nil {
			if apierrors.IsConflict(uerr) {
				return uerr
			}
			return wrapAPI(uerr, "update %s %s/%s", r.Kind(), ns, name)
		}
		obj, changed = updated, true
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return obj, changed, nil
}
