package workflows

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/runstate"
)

func TestBoundStatusKeepsTheSnapshotUnderTheLimit(t *testing.T) {
	big := strings.Repeat("x", 60<<10)
	fan := runstate.StepStatus{Name: "fan", State: runstate.StepSucceeded}
	var list []any
	for k := 0; k < 40; k++ {
		out := map[string]any{"blob": big}
		fan.Items = append(fan.Items, runstate.StepStatus{Name: "fan[k]", State: runstate.StepSucceeded, Outputs: out})
		list = append(list, out)
	}
	fan.Outputs = list
	small := runstate.StepStatus{Name: "small", State: runstate.StepSucceeded, Outputs: map[string]any{"acc": 0.9}}
	s := runstate.Status{RunID: "r", Steps: []runstate.StepStatus{fan, small}}

	boundStatus(&s)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > maxStatusBytes {
		t.Fatalf("status is %d bytes, limit %d", len(b), maxStatusBytes)
	}
	for _, it := range s.Steps[0].Items {
		if it.Outputs != nil {
			t.Fatal("items repeat the forEach step's outputs")
		}
	}
	if s.Steps[1].Outputs == nil {
		t.Error("small outputs dropped before large ones")
	}
	if len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "omitted") {
		t.Errorf("warnings: %q", s.Warnings)
	}

	// A status under the limit only loses the repetition.
	s = runstate.Status{RunID: "r", Steps: []runstate.StepStatus{small}}
	boundStatus(&s)
	if s.Steps[0].Outputs == nil || len(s.Warnings) != 0 {
		t.Errorf("small status changed: %+v", s)
	}
}
