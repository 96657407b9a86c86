package framework

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/atelier-ml/atelier/activities"
)

// Invalid returns the non-retryable InvalidStep error: the step cannot run
// as written, and retrying the same request cannot help.
func Invalid(format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), activities.ErrTypeInvalidStep, nil)
}

// StepFailed returns the non-retryable StepFailed error with details.
func StepFailed(msg string, details any) error {
	return temporal.NewNonRetryableApplicationError(msg, activities.ErrTypeStepFailed, nil, details)
}

// IsRejection reports whether the API server rejected the request itself:
// 422 Invalid (schema, CEL rules, metadata), 400 BadRequest, 403 Forbidden
// (admission webhooks, policy, quota, RBAC) or 413 too large. Sending the
// same request again cannot succeed.
func IsRejection(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) || apierrors.IsForbidden(err) ||
		apierrors.IsRequestEntityTooLargeError(err)
}

// APIError classifies an error from the API server. A rejection (see
// IsRejection) becomes a non-retryable InvalidStep whose message is the
// server's own: it names the offending field, which is what the pipeline
// author needs. Everything else (network errors, timeouts, 429, 5xx,
// conflicts) is returned as is: a plain, retryable error, since every
// operation of the backend is idempotent and a Temporal retry resumes where
// it stopped.
func APIError(err error) error {
	if err == nil || !IsRejection(err) {
		return err
	}
	return temporal.NewNonRetryableApplicationError(serverMessage(err), activities.ErrTypeInvalidStep, nil)
}

// serverMessage is the API server's message, without client-side framing.
func serverMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
}

// IsMissingNamespace reports whether a create failed because the namespace
// does not exist (as opposed to the resource type not being served).
func IsMissingNamespace(err error) bool {
	var se apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &se) {
		return false
	}
	d := se.Status().Details
	return d != nil && d.Kind == "namespaces"
}
