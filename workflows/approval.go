package workflows

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// Approval starts an approval step in a native Go pipeline: it waits in
// WAITING_FOR_APPROVAL for UpdateApproval (REST approve/reject), or for
// timeout (0 = none) to decide a.OnTimeout. Approved, its outputs are
// {approved, approver, comment}; rejected, Get returns a *StepError.
func (r *Run) Approval(ctx workflow.Context, name string, a pipeline.ApprovalStep, timeout time.Duration) StepFuture {
	st := r.addStep(name, string(pipeline.KindApproval))
	if f, ok := r.reusedStep(ctx, st); ok {
		return f
	}
	fut, set := workflow.NewFuture(ctx)
	workflow.Go(ctx, func(gctx workflow.Context) {
		out, err := r.runApproval(gctx, st, &a, timeout, nil)
		if err == errCancelled {
			err = temporal.NewCanceledError(st.Name)
		}
		set.Set(out, err)
	})
	return StepFuture{f: fut, name: st.Name}
}

// runApproval waits for the decision on an approval step and ends it:
// SUCCEEDED when approved, FAILED when rejected, CANCELLED when the run is
// cancelled (or its deadline passes) first, or when stop (nil: never)
// gives a reason to stop waiting. The wait is a durable condition on the
// step's status, which the update handler sets; it holds no activity or
// worker slot.
func (r *Run) runApproval(ctx workflow.Context, st *runstate.StepStatus, a *pipeline.ApprovalStep, timeout time.Duration, stop func() string) (Outputs, error) {
	if a == nil {
		a = &pipeline.ApprovalStep{}
	}
	now := workflow.Now(ctx)
	ap := &runstate.ApprovalStatus{Message: a.Message, Roles: a.DeciderRoles(), CommentRequired: a.CommentRequired}
	if timeout > 0 {
		deadline := now.Add(timeout)
		ap.Deadline = &deadline
		ap.OnTimeout = string(onTimeout(a))
	}
	st.StartedAt, st.State, st.Approval = &now, runstate.StepWaitingForApproval, ap
	r.countStepStarted(st)
	st.Message = "waiting for approval by a token with role " + strings.Join(ap.Roles, " or ")
	r.notice(st)
	r.touch()

	decided := func() bool { return ap.Decision != "" }
	stopped := func() string {
		if stop == nil {
			return ""
		}
		return stop()
	}
	done := func() bool { return decided() || stopped() != "" }
	if timeout > 0 {
		if ok, err := workflow.AwaitWithTimeout(ctx, timeout, done); err == nil && !ok {
			r.decideOnTimeout(st, a)
		}
	} else {
		_ = workflow.Await(ctx, done) // cancellation is read from ctx below
	}
	if why := stopped(); why != "" && ctx.Err() == nil && !decided() {
		r.endStep(st, runstate.StepCancelled, "", "stopped waiting for approval: "+why)
		return nil, errCancelled
	}
	if ctx.Err() != nil || !decided() {
		why := "run cancelled while waiting for approval"
		if r.deadline {
			why = "pipeline deadline exceeded while waiting for approval"
		}
		r.endStep(st, runstate.StepCancelled, "", why)
		return nil, errCancelled
	}
	out := Outputs{"approved": ap.Decision == runstate.ApprovalApproved, "approver": ap.Approver, "comment": ap.Comment}
	if ap.Decision == runstate.ApprovalApproved {
		st.Outputs = map[string]any(out)
		r.endStep(st, runstate.StepSucceeded, "", decisionSummary(ap))
		return out, nil
	}
	msg := decisionSummary(ap)
	r.endStep(st, runstate.StepFailed, msg, msg)
	return nil, &StepError{Step: st.Name, Message: msg}
}

func onTimeout(a *pipeline.ApprovalStep) pipeline.ApprovalOutcome {
	if a.OnTimeout == "" {
		return pipeline.ApprovalReject
	}
	return a.OnTimeout
}

func (r *Run) decideOnTimeout(st *runstate.StepStatus, a *pipeline.ApprovalStep) {
	now := workflow.Now(r.root)
	ap := st.Approval
	ap.Decision, ap.DecidedAt, ap.TimedOut = runstate.ApprovalRejected, &now, true
	if onTimeout(a) == pipeline.ApprovalApprove {
		ap.Decision = runstate.ApprovalApproved
	}
	r.touch()
}

// decisionSummary is the step's message (and error, when rejected).
func decisionSummary(ap *runstate.ApprovalStatus) string {
	s := string(ap.Decision) + " by " + ap.Approver
	if ap.TimedOut {
		s = string(ap.Decision) + " on timeout"
	}
	if ap.Comment != "" {
		s += ": " + ap.Comment
	}
	return s
}

// registerApprovals installs the UpdateApproval handler. Its validator
// refuses a decision before it reaches history: unknown step, step not
// waiting (or already decided), role not allowed, comment missing.
func (r *Run) registerApprovals(ctx workflow.Context) error {
	err := workflow.SetUpdateHandlerWithOptions(ctx, runstate.UpdateApproval,
		func(ctx workflow.Context, req runstate.ApprovalRequest) (runstate.Status, error) {
			// Checked again: a timeout may have decided since validation.
			if err := r.checkApproval(req); err != nil {
				return runstate.Status{}, err
			}
			r.decide(ctx, req)
			return r.Status(), nil
		},
		workflow.UpdateHandlerOptions{Validator: func(_ workflow.Context, req runstate.ApprovalRequest) error {
			return r.checkApproval(req)
		}})
	if err != nil {
		return fmt.Errorf("register approval update: %w", err)
	}
	return nil
}

// checkApproval says why req may not decide its step, or nil.
func (r *Run) checkApproval(req runstate.ApprovalRequest) error {
	st := r.stepByName(req.Step)
	if st == nil {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("run has no step %q", req.Step), runstate.ErrTypeApprovalUnknownStep, nil)
	}
	notWaiting := func(format string, args ...any) error {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), runstate.ErrTypeApprovalNotWaiting, nil)
	}
	ap := st.Approval
	switch {
	case st.Kind != string(pipeline.KindApproval):
		return notWaiting("step %q is a %s step, not an approval", st.Name, st.Kind)
	case ap != nil && ap.Decision != "":
		return notWaiting("step %q was already decided: %s", st.Name, decisionSummary(ap))
	case st.State != runstate.StepWaitingForApproval:
		return notWaiting("step %q is %s, not waiting for approval", st.Name, st.State)
	case !slices.Contains(ap.Roles, req.Role):
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("deciding step %q needs a token with role %s; this token's role is %s", st.Name, strings.Join(ap.Roles, " or "), req.Role),
			runstate.ErrTypeApprovalForbidden, nil)
	case ap.CommentRequired && strings.TrimSpace(req.Comment) == "":
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("step %q requires a comment with the decision", st.Name), runstate.ErrTypeApprovalCommentRequired, nil)
	}
	return nil
}

// decide records a checked decision; the step's coroutine ends the step.
func (r *Run) decide(ctx workflow.Context, req runstate.ApprovalRequest) {
	ap := r.stepByName(req.Step).Approval
	now := workflow.Now(ctx)
	ap.Decision = runstate.ApprovalRejected
	if req.Approve {
		ap.Decision = runstate.ApprovalApproved
	}
	ap.Approver, ap.ApproverID, ap.ApproverRole = req.Approver, req.ApproverID, req.Role
	ap.Comment, ap.DecidedAt = req.Comment, &now
	r.touch()
}
