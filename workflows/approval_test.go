package workflows_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

const approvalPipeline = `
steps:
  - {name: train, container: {command: ["ok model=m1"]}}
  - name: gate
    kind: approval
    dependsOn: [train]
    approval: {message: "ship {{ steps.train.outputs.model }}?", commentRequired: true}
  - {name: deploy, dependsOn: [gate], container: {command: ["ok deploy"]}}
  - {name: on-reject, dependsOn: [gate], runIf: anyFailed, container: {command: ["ok on-reject"]}}
`

// decide sends UpdateApproval at workflow time at and returns where its
// outcome lands: the validator's refusal, or the handler's result.
func decide(env *testsuite.TestWorkflowEnvironment, at time.Duration, req runstate.ApprovalRequest) *updateOutcome {
	out := &updateOutcome{}
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(runstate.UpdateApproval, fmt.Sprintf("%s-%v", req.Approver, at), &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { out.rejected = err },
			OnAccept:   func() {},
			OnComplete: func(v any, err error) { out.result, out.err = v, err },
		}, req)
	}, at)
	return out
}

func errType(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

func TestApprovalRefusalsThenApproval(t *testing.T) {
	env, rt, _ := newEnv(t)
	var waiting runstate.StepStatus
	env.RegisterDelayedCallback(func() { waiting = stepNamed(t, status(t, env), "gate") }, time.Minute)
	unknown := decide(env, 2*time.Minute, runstate.ApprovalRequest{Step: "nope", Approve: true, Role: "admin", Approver: "a"})
	notApproval := decide(env, 3*time.Minute, runstate.ApprovalRequest{Step: "train", Approve: true, Role: "admin", Approver: "b"})
	viewer := decide(env, 4*time.Minute, runstate.ApprovalRequest{Step: "gate", Approve: true, Comment: "lgtm", Role: "viewer", Approver: "c"})
	noComment := decide(env, 5*time.Minute, runstate.ApprovalRequest{Step: "gate", Approve: true, Role: "editor", Approver: "d"})
	editor := decide(env, 6*time.Minute, runstate.ApprovalRequest{Step: "gate", Approve: true, Comment: "lgtm", Role: "editor", Approver: "alice", ApproverID: "tok-1"})
	again := decide(env, 6*time.Minute, runstate.ApprovalRequest{Step: "gate", Approve: false, Comment: "no", Role: "admin", Approver: "e"})
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, approvalPipeline, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	assert.Equal(t, runstate.StepWaitingForApproval, waiting.State)
	require.NotNil(t, waiting.Approval)
	assert.Equal(t, []string{"editor", "admin"}, waiting.Approval.Roles)
	assert.Equal(t, "ship m1?", waiting.Approval.Message, "the message is rendered")

	assert.Equal(t, runstate.ErrTypeApprovalUnknownStep, errType(unknown.rejected))
	assert.Equal(t, runstate.ErrTypeApprovalNotWaiting, errType(notApproval.rejected))
	assert.Equal(t, runstate.ErrTypeApprovalForbidden, errType(viewer.rejected))
	assert.Contains(t, viewer.rejected.Error(), "needs a token with role editor or admin; this token's role is viewer")
	assert.Equal(t, runstate.ErrTypeApprovalCommentRequired, errType(noComment.rejected))
	require.NoError(t, editor.rejected)
	require.NoError(t, editor.err)
	// A second decision in the same moment finds the step decided.
	assert.Equal(t, runstate.ErrTypeApprovalNotWaiting, errType(again.rejected))
	assert.Contains(t, again.rejected.Error(), `step "gate" was already decided: approved by alice: lgtm`)

	s := status(t, env)
	assert.Equal(t, runstate.Succeeded, s.State)
	gate := stepNamed(t, s, "gate")
	assert.Equal(t, runstate.StepSucceeded, gate.State)
	assert.Equal(t, runstate.ApprovalApproved, gate.Approval.Decision)
	assert.Equal(t, "alice", gate.Approval.Approver)
	assert.Equal(t, "tok-1", gate.Approval.ApproverID)
	assert.Equal(t, "editor", gate.Approval.ApproverRole)
	assert.Equal(t, "lgtm", gate.Approval.Comment)
	assert.NotNil(t, gate.Approval.DecidedAt)
	assert.Equal(t, map[string]any{"approved": true, "approver": "alice", "comment": "lgtm"}, gate.Outputs)
	assert.Equal(t, "approved by alice: lgtm", gate.Message)
	assert.Equal(t, runstate.StepSucceeded, stepNamed(t, s, "deploy").State)
	assert.Equal(t, runstate.StepSkipped, stepNamed(t, s, "on-reject").State)
	assert.Contains(t, rt.commands(), "ok deploy")
}

func TestApprovalRejectedFailsTheRun(t *testing.T) {
	env, rt, _ := newEnv(t)
	decide(env, time.Minute, runstate.ApprovalRequest{Step: "gate", Approve: false, Comment: "metrics regressed", Role: "admin", Approver: "bob"})
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, approvalPipeline, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.Error(t, env.GetWorkflowError())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	assert.Equal(t, `step "gate" failed: rejected by bob: metrics regressed`, s.Error)
	gate := stepNamed(t, s, "gate")
	assert.Equal(t, runstate.StepFailed, gate.State)
	assert.Equal(t, runstate.ApprovalRejected, gate.Approval.Decision)
	assert.Equal(t, runstate.StepSkipped, stepNamed(t, s, "deploy").State)
	assert.Equal(t, runstate.StepSucceeded, stepNamed(t, s, "on-reject").State, "anyFailed reacts to the rejection")
	assert.Contains(t, rt.commands(), "ok on-reject")
}

func TestApprovalTimeout(t *testing.T) {
	for _, tc := range []struct {
		onTimeout string
		want      runstate.State
		decision  runstate.ApprovalDecision
	}{
		{"approve", runstate.Succeeded, runstate.ApprovalApproved},
		{"reject", runstate.Failed, runstate.ApprovalRejected},
		{"", runstate.Failed, runstate.ApprovalRejected},
	} {
		t.Run("onTimeout="+tc.onTimeout, func(t *testing.T) {
			env, _, _ := newEnv(t)
			env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, fmt.Sprintf(`
steps:
  - {name: gate, kind: approval, timeout: 1h, approval: {onTimeout: %q}}
`, tc.onTimeout), nil))
			require.True(t, env.IsWorkflowCompleted())
			s := status(t, env)
			assert.Equal(t, tc.want, s.State)
			gate := stepNamed(t, s, "gate")
			assert.Equal(t, tc.decision, gate.Approval.Decision)
			assert.True(t, gate.Approval.TimedOut)
			assert.Empty(t, gate.Approval.Approver)
			assert.Equal(t, string(tc.decision)+" on timeout", gate.Message)
			assert.Equal(t, time.Hour, gate.Approval.Deadline.Sub(*gate.StartedAt))
		})
	}
}

func TestApprovalCancelledWhileWaiting(t *testing.T) {
	env, _, _ := newEnv(t)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(runstate.SignalCancel, runstate.CancelRequest{Reason: "not today", Requester: "test"})
	}, time.Minute)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, approvalPipeline, nil))
	require.True(t, env.IsWorkflowCompleted())
	require.True(t, temporal.IsCanceledError(env.GetWorkflowError()))
	s := status(t, env)
	assert.Equal(t, runstate.Cancelled, s.State)
	gate := stepNamed(t, s, "gate")
	assert.Equal(t, runstate.StepCancelled, gate.State)
	assert.Equal(t, "run cancelled while waiting for approval", gate.Message)
	assert.Empty(t, gate.Approval.Decision)
}

// A run that fails while an approval waits does not wait for a person:
// the approval stops, CANCELLED with the failure as the reason.
func TestApprovalStopsWhenTheRunFails(t *testing.T) {
	env, _, _ := newEnv(t)
	env.ExecuteWorkflow(runstate.PipelineWorkflowName, input(t, `
steps:
  - {name: gate, kind: approval}
  - {name: train, container: {command: ["fail"]}}
  - {name: cleanup, dependsOn: [gate, train], runIf: allDone, container: {command: ["ok cleanup"]}}
`, nil))
	require.True(t, env.IsWorkflowCompleted())
	s := status(t, env)
	assert.Equal(t, runstate.Failed, s.State)
	gate := stepNamed(t, s, "gate")
	assert.Equal(t, runstate.StepCancelled, gate.State)
	assert.Equal(t, `stopped waiting for approval: step "train" failed: command exited with code 3`, gate.Message)
	assert.Equal(t, runstate.StepSucceeded, stepNamed(t, s, "cleanup").State)
}

// The native Go API: Run.Approval waits for the same update.
func TestGoPipelineApproval(t *testing.T) {
	env, _, _ := newEnv(t)
	wf := func(ctx workflow.Context) error {
		run, ctx, err := workflows.Begin(ctx, workflows.RunOptions{Project: "p1"})
		if err != nil {
			return err
		}
		out, err := run.Approval(ctx, "gate", pipeline.ApprovalStep{MinRole: "admin"}, 0).Get(ctx)
		return run.End(out, err)
	}
	env.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: "go-approval"})
	editor := decide(env, time.Minute, runstate.ApprovalRequest{Step: "gate", Approve: true, Role: "editor", Approver: "e"})
	decide(env, 2*time.Minute, runstate.ApprovalRequest{Step: "gate", Approve: true, Role: "admin", Approver: "root"})
	env.ExecuteWorkflow("go-approval")
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	assert.Equal(t, runstate.ErrTypeApprovalForbidden, errType(editor.rejected))
	s := status(t, env)
	assert.Equal(t, map[string]any{"approved": true, "approver": "root", "comment": ""}, s.Result)
}

// updateOutcome is what a test's Update call came to.
type updateOutcome struct {
	rejected, err error
	result        any
}
