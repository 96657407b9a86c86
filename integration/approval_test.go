package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/runstate"
)

// Pipelines of the trigger-rule and approval tests (and of their recorded
// histories, record_test.go).
const (
	diamondPipeline = `
steps:
  - {name: a, container: {command: ["true"]}}
  - {name: b, dependsOn: [a], when: "false", container: {command: ["true"]}}
  - {name: c, dependsOn: [a], container: {command: ["true"]}}
  - {name: join, dependsOn: [b, c], runIf: noneFailed, container: {command: ["true"]}}
  - {name: strict-join, dependsOn: [b, c], container: {command: ["true"]}}
`
	onFailurePipeline = `
steps:
  - {name: train, container: {command: ["sh", "-c", "exit 3"]}}
  - {name: evaluate, dependsOn: [train], container: {command: ["true"]}}
  - {name: notify, dependsOn: [train], runIf: anyFailed, container: {command: ["true"]}}
  - {name: cleanup, dependsOn: [evaluate, notify], runIf: allDone, container: {command: ["true"]}}
`
	gatePipeline = `
steps:
  - {name: train, container: {command: ["true"]}}
  - name: gate
    kind: approval
    dependsOn: [train]
    approval: {message: "deploy the model?", commentRequired: true}
  - {name: deploy, dependsOn: [gate], container: {command: ["true"]}}
`
	gateTimeoutPipeline = `
steps:
  - {name: gate, kind: approval, timeout: 1s, approval: {onTimeout: approve}}
  - {name: deploy, dependsOn: [gate], container: {command: ["true"]}}
`
)

// newToken adds a token of role to the stack's project and returns its secret.
func (s *stack) newToken(name string, role tokens.Role) string {
	s.t.Helper()
	secret, hash := tokens.New()
	_, err := s.store.CreateToken(context.Background(), catalog.Token{Name: name, Project: s.project, Role: role}, hash)
	require.NoError(s.t, err)
	return secret
}

// decide approves or rejects step with the token secret (comment: nil
// for none) and returns the status, the problem of a refusal (zero
// otherwise) and the body for failure messages.
func (s *stack) decide(runID, step, verb, secret string, comment *string) (int, gen.Problem, string) {
	s.t.Helper()
	c, ctx, body := s.clientAs(secret), context.Background(), gen.ApprovalDecisionRequest{Comment: comment}
	if verb == "reject" {
		res, err := c.RejectStepWithResponse(ctx, s.project, runID, step, body)
		require.NoError(s.t, err)
		return res.StatusCode(), firstProblem(res.ApplicationproblemJSON403, res.ApplicationproblemJSON404, res.ApplicationproblemJSON409, res.ApplicationproblemJSON422), string(res.Body)
	}
	res, err := c.ApproveStepWithResponse(ctx, s.project, runID, step, body)
	require.NoError(s.t, err)
	return res.StatusCode(), firstProblem(res.ApplicationproblemJSON403, res.ApplicationproblemJSON404, res.ApplicationproblemJSON409, res.ApplicationproblemJSON422), string(res.Body)
}

// firstProblem is the typed problem a response carries, among its
// ApplicationproblemJSONxxx fields (zero when none).
func firstProblem(ps ...*gen.Problem) gen.Problem {
	for _, p := range ps {
		if p != nil {
			return *p
		}
	}
	return gen.Problem{}
}

func TestTriggerRulesOnRealStack(t *testing.T) {
	s := newStack(t)
	s.createPipeline("diamond", diamondPipeline)
	s.createPipeline("on-failure", onFailurePipeline)
	diamond := s.start("diamond", nil)
	failing := s.start("on-failure", nil)

	r := s.waitTerminal(diamond, 60*time.Second)
	require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
	assert.Equal(t, gen.StepStateSKIPPED, stepByName(r, "b").State)
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "join").State, "noneFailed runs past a skipped branch")
	strict := stepByName(r, "strict-join")
	assert.Equal(t, gen.StepStateSKIPPED, strict.State, "the default still skips")
	assert.Equal(t, `skipped: runIf allSucceeded (the default) not met: dependency "b" skipped`, val(strict.Message))

	r = s.waitTerminal(failing, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State, "%+v", r.Status)
	assert.Contains(t, val(r.Status.Error), `step "train" failed`)
	assert.Equal(t, gen.StepStateSKIPPED, stepByName(r, "evaluate").State)
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "notify").State, "anyFailed runs after the failure")
	assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "cleanup").State, "allDone runs after the failure")
}

func TestApprovalsOnRealStack(t *testing.T) {
	s := newStack(t)
	viewer := s.newToken("dash", tokens.RoleViewer)
	editor := s.token // "ci-editor"
	s.createPipeline("gate", gatePipeline)
	s.createPipeline("gate-timeout", gateTimeoutPipeline)
	approved := s.start("gate", nil)
	rejected := s.start("gate", nil)
	cancelled := s.start("gate", nil)
	timedOut := s.start("gate-timeout", nil)

	t.Run("refused, then approved by an editor", func(t *testing.T) {
		r := s.waitStepState(approved, "gate", gen.StepStateWAITINGFORAPPROVAL)
		gate := stepByName(r, "gate")
		require.NotNil(t, gate.Approval)
		assert.Equal(t, []string{"editor", "admin"}, gate.Approval.Roles)
		assert.Equal(t, "deploy the model?", val(gate.Approval.Message))

		code, p, body := s.decide(approved, "gate", "approve", viewer, ptrTo("looks good"))
		assert.Equal(t, 403, code, "%s", body)
		assert.Equal(t, "https://atelier-ml.dev/problems/forbidden", p.Type)
		assert.Contains(t, val(p.Detail), "this token's role is viewer")
		code, _, body = s.decide(approved, "nope", "approve", editor, nil)
		assert.Equal(t, 404, code, "%s", body)
		code, p, body = s.decide(approved, "train", "approve", editor, nil)
		assert.Equal(t, 409, code, "%s", body)
		assert.Equal(t, "https://atelier-ml.dev/problems/step-not-waiting", p.Type)
		code, p, body = s.decide(approved, "gate", "approve", editor, nil)
		assert.Equal(t, 422, code, "%s", body)
		assert.Equal(t, "https://atelier-ml.dev/problems/comment-required", p.Type)

		code, _, body = s.decide(approved, "gate", "approve", editor, ptrTo("looks good"))
		require.Equal(t, 200, code, "%s", body)
		r = s.waitTerminal(approved, 30*time.Second)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
		gate = stepByName(r, "gate")
		assert.Equal(t, gen.StepStateSUCCEEDED, gate.State)
		assert.Equal(t, gen.Approved, val(gate.Approval.Decision))
		assert.Equal(t, "ci-editor", val(gate.Approval.Approver))
		assert.NotEmpty(t, val(gate.Approval.ApproverId))
		assert.Equal(t, "looks good", val(gate.Approval.Comment))
		assert.NotNil(t, gate.Approval.DecidedAt)
		assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "deploy").State)

		code, _, body = s.decide(approved, "gate", "reject", editor, ptrTo("too late"))
		assert.Equal(t, 409, code, "%s", body)

		// The workflow's own status query (what the Temporal UI shows).
		v, err := s.temporal.QueryWorkflow(context.Background(), approved, "", runstate.QueryStatus)
		require.NoError(t, err)
		var st runstate.Status
		require.NoError(t, v.Get(&st))
		var queried runstate.StepStatus
		for _, step := range st.Steps {
			if step.Name == "gate" {
				queried = step
			}
		}
		require.NotNil(t, queried.Approval)
		assert.Equal(t, "ci-editor", queried.Approval.Approver)
		assert.Equal(t, "looks good", queried.Approval.Comment)
	})

	t.Run("a rejection fails the run", func(t *testing.T) {
		s.waitStepState(rejected, "gate", gen.StepStateWAITINGFORAPPROVAL)
		code, _, body := s.decide(rejected, "gate", "reject", editor, ptrTo("accuracy regressed"))
		require.Equal(t, 200, code, "%s", body)
		r := s.waitTerminal(rejected, 30*time.Second)
		require.Equal(t, gen.RunStateFAILED, r.State)
		assert.Equal(t, `step "gate" failed: rejected by ci-editor: accuracy regressed`, val(r.Status.Error))
		assert.Equal(t, gen.StepStateSKIPPED, stepByName(r, "deploy").State)

		// The event stream's step events carry the decision too.
		gate := s.sseStep(t, rejected, "gate")
		require.NotNil(t, gate.Approval)
		assert.Equal(t, gen.Rejected, val(gate.Approval.Decision))
		assert.Equal(t, "ci-editor", val(gate.Approval.Approver))
		assert.Equal(t, "accuracy regressed", val(gate.Approval.Comment))
	})

	t.Run("the timeout decides", func(t *testing.T) {
		r := s.waitTerminal(timedOut, 30*time.Second)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%+v", r.Status)
		gate := stepByName(r, "gate")
		assert.True(t, val(gate.Approval.TimedOut))
		assert.Equal(t, gen.Approved, val(gate.Approval.Decision))
		assert.Equal(t, gen.StepStateSUCCEEDED, stepByName(r, "deploy").State)
	})

	t.Run("cancel while waiting", func(t *testing.T) {
		s.waitStepState(cancelled, "gate", gen.StepStateWAITINGFORAPPROVAL)
		s.cancel(cancelled, "not today")
		r := s.waitTerminal(cancelled, 30*time.Second)
		require.Equal(t, gen.RunStateCANCELLED, r.State)
		gate := stepByName(r, "gate")
		assert.Equal(t, gen.StepStateCANCELLED, gate.State)
		assert.Equal(t, "run cancelled while waiting for approval", val(gate.Message))
	})
}

// sseStep reads a finished run's event stream (a snapshot, then the end)
// and returns the last step event of step.
func (s *stack) sseStep(t *testing.T, runID, step string) gen.StepStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The plain client's StreamRunEvents leaves the body unread, as
	// `atelier run --watch` reads it.
	resp, err := s.client().StreamRunEvents(ctx, s.project, runID, nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	sc := bufio.NewScanner(resp.Body)
	var got gen.StepStatus
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case event == "step" && strings.HasPrefix(line, "data: "):
			var st gen.StepStatus
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &st))
			if st.Name == step {
				got = st
			}
		}
	}
	require.NoError(t, sc.Err())
	return got
}
