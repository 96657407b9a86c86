package catalog

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/runstate"
)

// Events are derived from the whole status: the same event has the same
// ID in every later status, and payloads carry no params or outputs.
func TestRunEvents(t *testing.T) {
	now := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	st := runstate.Status{
		RunID: "r1", Project: "p", Pipeline: "train", Workflow: runstate.PipelineWorkflowName, State: runstate.Running,
		Params: map[string]any{"apiKey": "do-not-send"},
		Steps: []runstate.StepStatus{
			{Name: "gate", Kind: "approval", State: runstate.StepWaitingForApproval, StartedAt: &now,
				Approval: &runstate.ApprovalStatus{Message: "ok?", Roles: []string{"admin"}}},
			{Name: "train", Kind: "container", State: runstate.StepFailed, FinishedAt: &now, Error: "exit 3",
				Outputs: map[string]any{"token": "do-not-send"}},
			{Name: "report", Kind: "container", State: runstate.StepFailed, FinishedAt: &now, OnExit: true},
		},
	}
	ev := RunEvents(st)
	if len(ev) != 3 || ev[0].Type != EventApprovalRequested || ev[1].Type != EventStepFailed || ev[2].Step != "report" {
		t.Fatalf("events %+v", ev)
	}
	st.State, st.FinishedAt = runstate.Failed, &now
	later := RunEvents(st)
	if len(later) != 4 || later[1].ID != ev[1].ID || later[3].Type != EventRunFinished {
		t.Fatalf("later events %+v", later)
	}
	for _, e := range later {
		if strings.Contains(string(e.Payload), "do-not-send") {
			t.Errorf("%s payload leaks params or outputs: %s", e.Type, e.Payload)
		}
	}
	var fin map[string]any
	if err := json.Unmarshal(later[3].Payload, &fin); err != nil {
		t.Fatal(err)
	}
	run := fin["run"].(map[string]any)
	// An exit handler's failure is not one of the run's failed steps.
	if fin["id"] != later[3].ID || run["state"] != "FAILED" || len(run["failedSteps"].([]any)) != 1 || fin["time"] != "2026-11-26T09:00:00Z" {
		t.Errorf("run.finished payload %s", later[3].Payload)
	}
}
