package pipeline

import (
	"os"
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestExamplePipeline keeps examples/pipelines/train-evaluate.yaml valid for
// the local runtime and checks that its templates render against plausible
// outputs.
func TestExamplePipeline(t *testing.T) {
	data, err := os.ReadFile("../examples/pipelines/train-evaluate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, ValidateOptions{Kinds: []StepKind{KindContainer}}); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]int{{}, {0}, {1}, {2}}, Dependencies(p)); diff != "" {
		t.Fatalf("Dependencies (-want +got):\n%s", diff)
	}
	params, err := ResolveParams(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"dataset": "iris", "epochs": 3.0, "threshold": 0.8}
	if !reflect.DeepEqual(params, want) {
		t.Fatalf("params = %v, want %v", params, want)
	}

	env := Env{Params: params, Run: RunEnv{ID: "r1", Project: "demo", Pipeline: "train-evaluate"}, Steps: map[string]StepEnv{}}
	env.Steps["prepare"] = StepEnv{Outputs: map[string]any{"rows": 150.0}}

	train := p.Steps[1]
	items, err := EvalItems(train.ForEach, env)
	if err != nil || !reflect.DeepEqual(items, []any{0.01, 0.1}) {
		t.Fatalf("items = %v, %v", items, err)
	}
	var outs []any
	for _, it := range items {
		e := env
		e.Item, e.HasItem = it, true
		c, err := RenderContainer(train.Container, e)
		if err != nil {
			t.Fatal(err)
		}
		if c.Env["ROWS"] != "150" || c.Env["EPOCHS"] != "3" {
			t.Errorf("train env = %v", c.Env)
		}
		outs = append(outs, map[string]any{"accuracy": 0.9, "lr": it})
	}
	env.Steps["train"] = StepEnv{Outputs: outs}

	c, err := RenderContainer(p.Steps[2].Container, env)
	if err != nil {
		t.Fatal(err)
	}
	if c.Env["BEST"] != "0.9" {
		t.Errorf("evaluate BEST = %q", c.Env["BEST"])
	}

	for _, tc := range []struct {
		acc  float64
		want bool
	}{{0.9, true}, {0.5, false}} {
		env.Steps["evaluate"] = StepEnv{Outputs: map[string]any{"accuracy": tc.acc}}
		got, err := EvalWhen(p.Steps[3].When, env)
		if err != nil || got != tc.want {
			t.Errorf("deploy when (accuracy %v) = %v, %v; want %v", tc.acc, got, err, tc.want)
		}
	}
	if _, err := RenderContainer(p.Steps[3].Container, env); err != nil {
		t.Error(err)
	}
}
