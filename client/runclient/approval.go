package runclient

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/runstate"
)

// Why the run's workflow refused a decision on an approval step.
var (
	ErrStepNotFound      = errors.New("no such step")
	ErrStepNotWaiting    = errors.New("step not waiting for approval")
	ErrApprovalForbidden = errors.New("role not allowed to decide")
	ErrCommentRequired   = errors.New("comment required")
)

// RefusedError is a decision the workflow's validator refused. It wraps
// one of the Err* sentinels above; Message is the workflow's reason,
// written for the person who asked.
type RefusedError struct {
	Kind    error
	Message string
}

func (e *RefusedError) Error() string { return e.Message }
func (e *RefusedError) Unwrap() error { return e.Kind }

var refusals = map[string]error{
	runstate.ErrTypeApprovalUnknownStep:     ErrStepNotFound,
	runstate.ErrTypeApprovalNotWaiting:      ErrStepNotWaiting,
	runstate.ErrTypeApprovalForbidden:       ErrApprovalForbidden,
	runstate.ErrTypeApprovalCommentRequired: ErrCommentRequired,
}

// DecideApproval sends a decision on a waiting approval step (the
// UpdateApproval update) and returns the run's status once it is
// recorded. A refusal is a *RefusedError; a run whose workflow is not
// open, ErrRunNotFound.
func (e *Client) DecideApproval(ctx context.Context, runID string, req runstate.ApprovalRequest) (runstate.Status, error) {
	var st runstate.Status
	h, err := e.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: runID, UpdateName: runstate.UpdateApproval,
		Args: []any{req}, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, &st)
	}
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return st, nil
	case isNotFound(err):
		return st, ErrRunNotFound
	case errors.As(err, &appErr) && refusals[appErr.Type()] != nil:
		return st, &RefusedError{Kind: refusals[appErr.Type()], Message: appErr.Message()}
	}
	return st, fmt.Errorf("runclient: decide approval of step %q in run %s: %w", req.Step, runID, err)
}
