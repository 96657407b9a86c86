package catalog

import (
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/runstate"
)

// A failed step's output, which its error and the run's quote, is in the
// opt-in payload only.
func TestRunEventsLeaveOutStepOutput(t *testing.T) {
	msg := "command exited with code 3" + runstate.OutputTail + "token=hunter2"
	st := runstate.Status{RunID: "r1", Project: "p", State: runstate.Failed, Error: `step "train" failed: ` + msg,
		Steps: []runstate.StepStatus{{Name: "train", State: runstate.StepFailed, Error: msg}}}
	events := RunEvents(st)
	if len(events) != 2 {
		t.Fatalf("%d events", len(events))
	}
	for _, e := range events {
		if strings.Contains(string(e.Payload), "hunter2") || !strings.Contains(string(e.Payload), "(output left out)") {
			t.Errorf("%s: %s", e.Type, e.Payload)
		}
		if !strings.Contains(string(e.PayloadWithOutput), "hunter2") {
			t.Errorf("%s opt-in: %s", e.Type, e.PayloadWithOutput)
		}
	}
}
