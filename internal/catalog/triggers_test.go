package catalog

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/runstate"
)

// A run trigger's payload: params, outputs, top-level steps with their
// artifacts by name (exit handlers left out); past the size bound the
// steps' outputs go, their states and artifacts stay.
func TestRunFinishedPayload(t *testing.T) {
	st := runstate.Status{
		RunID: "r1", Pipeline: "prep", Version: 2, State: runstate.Succeeded, Params: map[string]any{"lr": 0.5},
		Result: map[string]any{"path": "/d"},
		Steps: []runstate.StepStatus{
			{Name: "train", State: runstate.StepSucceeded, Outputs: map[string]any{"acc": 0.9},
				Artifacts: []runstate.Artifact{{ID: "art-1", Name: "model", Type: "file", Digest: "sha256:ab", Size: 3}}},
			{Name: "cleanup", State: runstate.StepSucceeded, OnExit: true},
		},
	}
	b, err := NewRunFinishedPayload(st, "prep")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := `{"outputs":{"path":"/d"},"params":{"lr":0.5},"pipeline":"prep","runId":"r1","state":"SUCCEEDED",` +
		`"steps":{"train":{"artifacts":{"model":{"digest":"sha256:ab","id":"art-1","size":3,"type":"file"}},"outputs":{"acc":0.9},"state":"SUCCEEDED"}},"version":2}`
	if g, _ := json.Marshal(got); string(g) != want {
		t.Fatalf("got  %s\nwant %s", g, want)
	}

	st.Steps[0].Outputs = map[string]any{"big": strings.Repeat("x", MaxRunFinishedPayload)}
	b, err = NewRunFinishedPayload(st, "prep")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxRunFinishedPayload || strings.Contains(string(b), "xxxx") || !strings.Contains(string(b), `"art-1"`) {
		t.Fatalf("%d bytes: %.300s", len(b), b)
	}
}
