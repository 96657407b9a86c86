package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/tokens"
	"github.com/atelier-ml/atelier/workflows"
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
func (s *stack) newToken(name string, role catalog.Role) string {
	s.t.Helper()
	secret, hash := tokens.New()
	_, err := s.store.CreateToken(context.Background(), catalog.Token{Name: name, Project: s.project, Role: role}, hash)
	require.NoError(s.t, err)
	return secret
}

// decide posts approve or reject for step with the token secret and
// returns the status code and the body (a run or a problem).
func (s *stack) decide(runID, step, verb, secret string, body any) (int, map[string]any) {
	s.t.Helper()
	var out map[string]any
	code := s.do("POST", s.path("/runs/%s/steps/%s/%s", runID, step, verb), body, &out, "Authorization", "Bearer "+secret)
	return code, out
}

func (s *stack) waitStepState(id, step string, state workflows.StepState) runView {
	s.t.Helper()
	return s.waitRun(id, 30*time.Second, step+" "+string(state), func(r runView) bool {
		return r.Status != nil && stepByName(r, step).State == state
	})
}

func TestTriggerRulesOnRealStack(t *testing.T) {
	s := newStack(t)
	s.createPipeline("diamond", diamondPipeline)
	s.createPipeline("on-failure", onFailurePipeline)
	diamond := s.startRun(map[string]any{"pipeline": "diamond"})
	failing := s.startRun(map[string]any{"pipeline": "on-failure"})

	r := s.waitTerminal(diamond, 60*time.Second)
	require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status)
	assert.Equal(t, workflows.StepSkipped, stepByName(r, "b").State)
	assert.Equal(t, workflows.StepSucceeded, stepByName(r, "join").State, "noneFailed runs past a skipped branch")
	strict := stepByName(r, "strict-join")
	assert.Equal(t, workflows.StepSkipped, strict.State, "the default still skips")
	assert.Equal(t, `skipped: runIf allSucceeded (the default) not met: dependency "b" skipped`, strict.Message)

	r = s.waitTerminal(failing, 60*time.Second)
	require.Equal(t, workflows.RunFailed, r.State, "%+v", r.Status)
	assert.Contains(t, r.Status.Error, `step "train" failed`)
	assert.Equal(t, workflows.StepSkipped, stepByName(r, "evaluate").State)
	assert.Equal(t, workflows.StepSucceeded, stepByName(r, "notify").State, "anyFailed runs after the failure")
	assert.Equal(t, workflows.StepSucceeded, stepByName(r, "cleanup").State, "allDone runs after the failure")
}

func TestApprovalsOnRealStack(t *testing.T) {
	s := newStack(t)
	viewer := s.newToken("dash", catalog.RoleViewer)
	editor := s.token // "ci-editor"
	s.createPipeline("gate", gatePipeline)
	s.createPipeline("gate-timeout", gateTimeoutPipeline)
	approved := s.startRun(map[string]any{"pipeline": "gate"})
	rejected := s.startRun(map[string]any{"pipeline": "gate"})
	cancelled := s.startRun(map[string]any{"pipeline": "gate"})
	timedOut := s.startRun(map[string]any{"pipeline": "gate-timeout"})

	t.Run("refused, then approved by an editor", func(t *testing.T) {
		r := s.waitStepState(approved, "gate", workflows.StepWaitingForApproval)
		gate := stepByName(r, "gate")
		require.NotNil(t, gate.Approval)
		assert.Equal(t, []string{"editor", "admin"}, gate.Approval.Roles)
		assert.Equal(t, "deploy the model?", gate.Approval.Message)

		code, p := s.decide(approved, "gate", "approve", viewer, map[string]any{"comment": "looks good"})
		assert.Equal(t, 403, code, "%v", p)
		assert.Equal(t, "https://atelier-ml.dev/problems/forbidden", p["type"])
		assert.Contains(t, p["detail"], "this token's role is viewer")
		code, p = s.decide(approved, "nope", "approve", editor, nil)
		assert.Equal(t, 404, code, "%v", p)
		code, p = s.decide(approved, "train", "approve", editor, nil)
		assert.Equal(t, 409, code, "%v", p)
		assert.Equal(t, "https://atelier-ml.dev/problems/step-not-waiting", p["type"])
		code, p = s.decide(approved, "gate", "approve", editor, map[string]any{})
		assert.Equal(t, 422, code, "%v", p)
		assert.Equal(t, "https://atelier-ml.dev/problems/comment-required", p["type"])

		code, body := s.decide(approved, "gate", "approve", editor, map[string]any{"comment": "looks good"})
		require.Equal(t, 200, code, "%v", body)
		r = s.waitTerminal(approved, 30*time.Second)
		require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status)
		gate = stepByName(r, "gate")
		assert.Equal(t, workflows.StepSucceeded, gate.State)
		assert.Equal(t, workflows.ApprovalApproved, gate.Approval.Decision)
		assert.Equal(t, "ci-editor", gate.Approval.Approver)
		assert.NotEmpty(t, gate.Approval.ApproverID)
		assert.Equal(t, "looks good", gate.Approval.Comment)
		assert.NotNil(t, gate.Approval.DecidedAt)
		assert.Equal(t, workflows.StepSucceeded, stepByName(r, "deploy").State)

		code, p = s.decide(approved, "gate", "reject", editor, map[string]any{"comment": "too late"})
		assert.Equal(t, 409, code, "%v", p)

		// The workflow's own status query (what the Temporal UI shows).
		v, err := s.temporal.QueryWorkflow(context.Background(), approved, "", workflows.QueryStatus)
		require.NoError(t, err)
		var st workflows.RunStatus
		require.NoError(t, v.Get(&st))
		queried := stepByName(runView{Status: &st}, "gate")
		require.NotNil(t, queried.Approval)
		assert.Equal(t, "ci-editor", queried.Approval.Approver)
		assert.Equal(t, "looks good", queried.Approval.Comment)
	})

	t.Run("a rejection fails the run", func(t *testing.T) {
		s.waitStepState(rejected, "gate", workflows.StepWaitingForApproval)
		code, body := s.decide(rejected, "gate", "reject", editor, map[string]any{"comment": "accuracy regressed"})
		require.Equal(t, 200, code, "%v", body)
		r := s.waitTerminal(rejected, 30*time.Second)
		require.Equal(t, workflows.RunFailed, r.State)
		assert.Equal(t, `step "gate" failed: rejected by ci-editor: accuracy regressed`, r.Status.Error)
		assert.Equal(t, workflows.StepSkipped, stepByName(r, "deploy").State)

		// The event stream's step events carry the decision too.
		gate := s.sseStep(t, rejected, "gate")
		require.NotNil(t, gate.Approval)
		assert.Equal(t, workflows.ApprovalRejected, gate.Approval.Decision)
		assert.Equal(t, "ci-editor", gate.Approval.Approver)
		assert.Equal(t, "accuracy regressed", gate.Approval.Comment)
	})

	t.Run("the timeout decides", func(t *testing.T) {
		r := s.waitTerminal(timedOut, 30*time.Second)
		require.Equal(t, workflows.RunSucceeded, r.State, "%+v", r.Status)
		gate := stepByName(r, "gate")
		assert.True(t, gate.Approval.TimedOut)
		assert.Equal(t, workflows.ApprovalApproved, gate.Approval.Decision)
		assert.Equal(t, workflows.StepSucceeded, stepByName(r, "deploy").State)
	})

	t.Run("cancel while waiting", func(t *testing.T) {
		s.waitStepState(cancelled, "gate", workflows.StepWaitingForApproval)
		require.Equal(t, 202, s.do("POST", s.path("/runs/%s/cancel", cancelled), map[string]any{"reason": "not today"}, nil))
		r := s.waitTerminal(cancelled, 30*time.Second)
		require.Equal(t, workflows.RunCancelled, r.State)
		gate := stepByName(r, "gate")
		assert.Equal(t, workflows.StepCancelled, gate.State)
		assert.Equal(t, "run cancelled while waiting for approval", gate.Message)
	})
}

// sseStep reads a finished run's event stream (a snapshot, then the end)
// and returns the last step event of step.
func (s *stack) sseStep(t *testing.T, runID, step string) workflows.StepStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", s.url+s.path("/runs/%s/events", runID), nil)
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var got workflows.StepStatus
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case event == "step" && strings.HasPrefix(line, "data: "):
			var st workflows.StepStatus
			require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &st))
			if st.Name == step {
				got = st
			}
		}
	}
	require.NoError(t, sc.Err())
	return got
}
