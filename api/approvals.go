package api

import (
	"context"
	"errors"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/runstate"
)

// decideTimeout bounds the wait for the run's workflow to take a decision:
// without a worker to run its validator, the update would wait for one.
const decideTimeout = 30 * time.Second

// ApproveStep approves a waiting approval step.
func (s *server) ApproveStep(ctx context.Context, req gen.ApproveStepRequestObject) (gen.ApproveStepResponseObject, error) {
	run, err := s.decideStep(ctx, req.Project, req.Run, req.Step, true, req.Body)
	if err != nil {
		return nil, err
	}
	return gen.ApproveStep200JSONResponse(run), nil
}

// RejectStep rejects a waiting approval step, which fails it.
func (s *server) RejectStep(ctx context.Context, req gen.RejectStepRequestObject) (gen.RejectStepResponseObject, error) {
	run, err := s.decideStep(ctx, req.Project, req.Run, req.Step, false, req.Body)
	if err != nil {
		return nil, err
	}
	return gen.RejectStep200JSONResponse(run), nil
}

// decideStep sends the decision to the run's workflow, which alone knows
// the step's rule and state: its validator refuses what may not decide
// before anything reaches history, and its reason becomes the problem's
// detail. The route needs only a viewer, so that a step may let viewers
// decide (approval.minRole: viewer).
func (s *server) decideStep(ctx context.Context, project, runID, step string, approve bool, body *gen.ApprovalDecisionRequest) (gen.Run, error) {
	run, err := s.getRun(ctx, project, runID)
	if err != nil {
		return gen.Run{}, err
	}
	if run.State.Terminal() {
		return gen.Run{}, newProblem(ptRunFinished, "run %s already finished (%s)", run.ID, run.State)
	}
	tok := principal(ctx)
	ctx, cancel := context.WithTimeout(ctx, decideTimeout)
	defer cancel()
	st, err := s.eng.DecideApproval(ctx, run.ID, runstate.ApprovalRequest{
		Step: step, Approve: approve, Comment: deref(deref(body).Comment),
		Approver: tok.Name, ApproverID: tok.ID, Role: string(tok.Role),
	})
	var refused *runclient.RefusedError
	switch {
	case err == nil:
		return s.runView(run, &st), nil
	case errors.Is(err, runclient.ErrRunNotFound):
		return gen.Run{}, newProblem(ptRunFinished, "run %s is not running", run.ID)
	case errors.As(err, &refused):
		return gen.Run{}, refusalProblem(refused)
	}
	return gen.Run{}, newProblem(ptUnavailable, "the workflow engine could not be reached, retry later").withHeader("Retry-After", retryAfterSeconds).withCause(err)
}

func refusalProblem(r *runclient.RefusedError) *problem {
	switch {
	case errors.Is(r, runclient.ErrStepNotFound):
		return notFound("%s", r.Message)
	case errors.Is(r, runclient.ErrApprovalForbidden):
		return newProblem(ptForbidden, "%s", r.Message)
	case errors.Is(r, runclient.ErrCommentRequired):
		return newProblem(ptCommentRequired, "%s", r.Message).withErrors([]gen.FieldError{{Path: "comment", Message: "required by this approval step"}})
	}
	return newProblem(ptStepNotWaiting, "%s", r.Message)
}
