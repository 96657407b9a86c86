package framework

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrMissingNamespace is wrapped by CreateOrAdopt when the namespace does
// not exist, so the caller can create it and try again.
var ErrMissingNamespace = fmt.Errorf("namespace does not exist")

// CreateOrAdopt creates desired or, when an object of that name exists,
// adopts it if its identity labels equal desired's: it is this very
// attempt, created by an earlier execution of the activity (a worker killed
// mid-step). An object of that name with other labels belongs to something
// else, and is never touched: that is a non-retryable InvalidStep.
//
// Because names are deterministic, this is what guarantees that retries
// never make a second object. adopted reports which case happened.
func CreateOrAdopt(ctx context.Context, r Resource, desired Object) (obj Object, adopted bool, err error) {
	ns, name := desired.GetNamespace(), desired.GetName()
	// Bounded: the loop only repeats when the object vanishes between the
	// failed create and the get, which needs a concurrent deleter.
	for range 3 {
		obj, err = r.Create(ctx, desired)
		if err == nil {
			return obj, false, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			if IsMissingNamespace(err) {
				return nil, false, fmt.Errorf("create %s %s/%s: %w", r.Kind(), ns, name, ErrMissingNamespace)
			}
			if apierrors.IsNotFound(err) {
				return nil, false, Invalid("cannot create %s %s/%s: the cluster does not serve %s objects (is its operator installed?): %v",
					r.Kind(), ns, name, r.Kind(), err)
			}
			return nil, false, wrapAPI(err, "create %s %s/%s", r.Kind(), ns, name)
		}
		obj, err = r.Get(ctx, ns, name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, false, wrapAPI(err, "get existing %s %s/%s", r.Kind(), ns, name)
		}
		if err := CheckAdoptable(r, obj, desired.GetLabels()); err != nil {
			return nil, false, err
		}
		return obj, true, nil
	}
	return nil, false, fmt.Errorf("%s %s/%s keeps disappearing while being created", r.Kind(), ns, name)
}

// CheckAdoptable returns nil if obj carries exactly the identity labels in
// want, else a non-retryable InvalidStep naming the conflict.
func CheckAdoptable(r Resource, obj Object, want map[string]string) error {
	if SameIdentity(obj.GetLabels(), want) {
		return nil
	}
	return Invalid("%s %s/%s already exists and is not this attempt's (it has %s; this attempt is %s): refusing to adopt or replace it",
		r.Kind(), obj.GetNamespace(), obj.GetName(), DescribeIdentity(obj.GetLabels()), DescribeIdentity(want))
}

// wrapAPI classifies err (see APIError); retryable errors get context.
func wrapAPI(err error, format string, args ...any) error {
	if IsRejection(err) {
		return APIError(err)
	}
	return fmt.Errorf(format+": %w", append(args, err)...)
}

// WrapAPI is wrapAPI for the integration packages and the backend.
func WrapAPI(err error, format string, args ...any) error { return wrapAPI(err, format, args...) }
