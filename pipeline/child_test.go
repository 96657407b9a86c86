package pipeline

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestValidatePipelineSteps(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		wants     []want
	}{
		{"a valid pipeline step, with forEach, retries and outputs", `
params: [{name: lr, type: number, default: 0.1}]
steps:
  - {name: prep, container: {command: [x]}}
  - name: train
    kind: pipeline
    forEach: {items: [1, 2]}
    retries: {limit: 1}
    timeout: 1h
    pipeline:
      name: train-model
      version: 3
      params: {lr: "{{ params.lr }}", seed: "{{ item }}", data: "s3://{{ steps.prep.outputs.uri }}", cfg: {depth: 3}}
outputs:
  model: "{{ steps.train.outputs[0].model }}"
  note: "lr {{ params.lr }} in run {{ run.id }}"
`, nil},
		{"block, name and version", `
steps:
  - {name: a, kind: pipeline}
  - {name: b, kind: pipeline, pipeline: {name: "{{ params.x }}"}}
  - {name: c, kind: pipeline, pipeline: {name: Bad_Name, version: -1}}
  - {name: d, pipeline: {name: other}, container: {command: [x]}}
  - {name: e, kind: pipeline, pipeline: {name: other, params: {"bad-name": 1}}, placement: {cluster: x}}
`, []want{
			{"steps[0].pipeline", "required for a pipeline step"},
			{"steps[1].pipeline.name", "templates are not supported"},
			{"steps[2].pipeline.name", `invalid pipeline name "Bad_Name"`},
			{"steps[2].pipeline.version", "must be a version number"},
			{"steps[3].pipeline", "only pipeline steps may set pipeline"},
			{"steps[4].pipeline.params[\"bad-name\"]", `invalid param name "bad-name"`},
			{"steps[4].placement", "placement does not apply"},
		}},
		{"templates in params are checked", `
steps:
  - {name: a, kind: pipeline, pipeline: {name: other, params: {x: "{{ params.nope }}", it: "{{ item }}", z: "{{ steps.zz.outputs.k }}"}}}
`, []want{
			{"steps[0].pipeline.params.it", "item is only available in steps with forEach"},
			{"steps[0].pipeline.params.x", `unknown param "nope"`},
			{"steps[0].pipeline.params.z", `unknown step "zz"`},
		}},
		{"outputs", `
steps:
  - {name: a, container: {command: [x]}}
outputs:
  "bad-name": "{{ steps.a.outputs.x }}"
  i: "{{ item }}"
  s: "{{ steps.b.outputs.x }}"
`, []want{
			{"outputs[\"bad-name\"]", `invalid output name "bad-name"`},
			{"outputs.i", "not in the pipeline's outputs"},
			{"outputs.s", `unknown step "b"`},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkProblems(t, problemsOf(t, Validate(mustParse(t, tc.src), localOpts)), tc.wants)
		})
	}
}

func TestPipelineStepDependencies(t *testing.T) {
	p := mustParse(t, `
steps:
  - {name: a, container: {command: [x]}}
  - {name: b, kind: pipeline, pipeline: {name: other, params: {x: "{{ steps.a.outputs.k }}"}}}
`)
	if got := Dependencies(p); !reflect.DeepEqual(got, [][]int{{}, {0}}) {
		t.Fatalf("dependencies %v, want b on a", got)
	}
}

func TestRenderPipelineStepKeepsTypes(t *testing.T) {
	env := Env{
		Params: map[string]any{"lr": 0.5, "tags": []any{"a"}},
		Steps:  map[string]StepEnv{"prep": {Outputs: map[string]any{"n": float64(3), "uri": "s3://x"}}},
		Item:   map[string]any{"k": "v"}, HasItem: true,
		Run: RunEnv{ID: "r1"},
	}
	c := &ChildStep{Name: "child", Version: 2, Params: map[string]any{
		"lr": "{{ params.lr }}", "n": " {{ steps.prep.outputs.n + 1 }} ", "tags": "{{ params.tags }}",
		"item": "{{ item }}", "uri": "{{ steps.prep.outputs.uri }}/{{ run.id }}", "lit": float64(7),
		"nested": map[string]any{"x": "{{ params.lr * 2 }}"}, "list": []any{"{{ run.id }}", true},
	}}
	got, err := RenderChildStep(c, env)
	if err != nil {
		t.Fatal(err)
	}
	want := &ChildStep{Name: "child", Version: 2, Params: map[string]any{
		"lr": 0.5, "n": float64(4), "tags": []any{"a"}, "item": map[string]any{"k": "v"},
		"uri": "s3://x/r1", "lit": float64(7), "nested": map[string]any{"x": float64(1)}, "list": []any{"r1", true},
	}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rendered %#v\nwant %#v", got, want)
	}
	if c.Params["lr"] != "{{ params.lr }}" {
		t.Fatal("the input was modified")
	}
	_, err = RenderChildStep(&ChildStep{Name: "c", Params: map[string]any{"x": "{{ steps.prep.outputs.missing }}"}}, env)
	if err == nil || !strings.Contains(err.Error(), "params.x") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("err %v, want one naming params.x and the missing key", err)
	}
}

func TestEvalOutputs(t *testing.T) {
	p := &Spec{Outputs: map[string]string{"acc": "{{ steps.eval.outputs.acc }}", "msg": "acc={{ steps.eval.outputs.acc }}", "lit": "v1"}}
	env := Env{Steps: map[string]StepEnv{"eval": {Outputs: map[string]any{"acc": 0.93}}}}
	got, err := EvalOutputs(p, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"acc": 0.93, "msg": "acc=0.93", "lit": "v1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outputs %v, want %v", got, want)
	}
	if got, err := EvalOutputs(&Spec{}, env); got != nil || err != nil {
		t.Fatalf("no outputs declared: %v, %v; want nil, nil", got, err)
	}
	_, err = EvalOutputs(&Spec{Outputs: map[string]string{"x": "{{ steps.eval.outputs.nope }}"}}, env)
	if err == nil || !strings.Contains(err.Error(), "outputs.x") {
		t.Fatalf("err %v, want one naming outputs.x", err)
	}
}

func TestCheckPipelineStep(t *testing.T) {
	child := mustParse(t, `
params:
  - {name: dataset, type: string}
  - {name: lr, type: number, default: 0.1}
  - {name: epochs, type: integer, default: 3}
steps: [{name: a, container: {command: [x]}}]
`)
	parent := mustParse(t, `
steps:
  - name: run
    kind: pipeline
    pipeline:
      name: child
      params: {lr: "x", epochs: "{{ params.n }} epochs", learningrate: 1, dataset: null}
  - {name: ok, kind: pipeline, pipeline: {name: child, version: 2, params: {dataset: "{{ run.id }}", lr: "{{ 1 }}", epochs: 4}}}
`)
	refs := ChildRefs(parent)
	if want := []ChildRef{{0, "steps[0]", "child", 0}, {1, "steps[1]", "child", 2}}; !reflect.DeepEqual(refs, want) {
		t.Fatalf("refs %+v, want %+v", refs, want)
	}
	checkProblems(t, CheckChildStep(refs[0], &parent.Steps[0], child), []want{
		{"steps[0].pipeline.params", `pipeline "child" requires param "dataset"`},
		{"steps[0].pipeline.params.epochs", "renders as a string"},
		{"steps[0].pipeline.params.learningrate", `pipeline "child" has no param "learningrate"`},
		{"steps[0].pipeline.params.lr", "must be a number"},
	})
	checkProblems(t, CheckChildStep(refs[1], &parent.Steps[1], child), nil)
}

func TestPipelineStepHistoryEstimate(t *testing.T) {
	one := mustParse(t, `steps: [{name: a, container: {command: [x]}}]`)
	child := mustParse(t, `steps: [{name: a, kind: pipeline, pipeline: {name: x}}]`)
	if EstimateHistoryEvents(child) <= EstimateHistoryEvents(one) {
		t.Fatal("a pipeline step costs no more history than a container step")
	}
}

// TestChildPipelineExamples keeps examples/pipelines/train-model.yaml and
// train-sweep.yaml valid for the local runtime, each other's params and
// outputs consistent, and the parent's templates working on outputs of the
// child's shape.
func TestChildPipelineExamples(t *testing.T) {
	load := func(name string) *Spec {
		data, err := os.ReadFile("../examples/pipelines/" + name)
		if err != nil {
			t.Fatal(err)
		}
		p := mustParse(t, string(data))
		if err := Validate(p, localOpts); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return p
	}
	child, parent := load("train-model.yaml"), load("train-sweep.yaml")
	refs := ChildRefs(parent)
	if len(refs) != 1 || refs[0].Name != "train-model" {
		t.Fatalf("refs %+v", refs)
	}
	if ps := CheckChildStep(refs[0], &parent.Steps[refs[0].Step], child); len(ps) > 0 {
		t.Fatalf("the sweep's params do not fit train-model: %+v", ps)
	}
	params, err := ResolveParams(parent, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Params: params, Steps: map[string]StepEnv{}}
	items, err := EvalItems(parent.Steps[0].ForEach, env)
	if err != nil {
		t.Fatal(err)
	}
	var outs []any
	for _, it := range items {
		e := env
		e.Item, e.HasItem = it, true
		c, err := RenderChildStep(parent.Steps[0].Pipeline, e)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := ResolveParams(child, c.Params)
		if err != nil {
			t.Fatalf("item %v: %v", it, err)
		}
		lr := cp["lr"].(float64)
		ce := Env{Params: cp, Steps: map[string]StepEnv{
			"train":    {Outputs: map[string]any{"model": "m-" + formatNumber(lr)}},
			"evaluate": {Outputs: map[string]any{"accuracy": 0.95 - (lr-0.1)*(lr-0.1)}},
		}}
		o, err := EvalOutputs(child, ce)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
	}
	env.Steps["sweep"] = StepEnv{Outputs: outs}
	got, err := EvalOutputs(parent, env)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]any{"best_model": "m-0.1", "best_accuracy": 0.95}; !reflect.DeepEqual(got, want) {
		t.Fatalf("outputs %v, want %v", got, want)
	}
}

func TestValidateArtifactExports(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		wants     []want
	}{
		{"exports of a container step and of a pipeline step, read by the parent", `
steps:
  - name: train
    container:
      command: [x]
      artifacts: {outputs: [{name: model, type: model}, {name: metrics}]}
  - {name: sub, kind: pipeline, pipeline: {name: child}}
  - name: evaluate
    container:
      command: [x]
      artifacts:
        inputs: [{name: m, from: sub.model}, {name: own, from: train.model}]
  - {name: promote, kind: promote, promote: {model: m, alias: champion, from: sub.model}}
artifacts:
  - {name: model, from: train.model}
  - {name: metrics_2, from: train.metrics}
  - {name: passed-on, from: sub.anything}
`, nil},
		{"every problem at once, with its path", `
steps:
  - name: train
    container:
      command: [x]
      artifacts: {outputs: [{name: model}]}
  - {name: sweep, forEach: {items: [1, 2]}, container: {command: [x], artifacts: {outputs: [{name: model}]}}}
  - {name: ok, kind: approval}
  - {name: subs, kind: pipeline, forEach: {items: [1, 2]}, pipeline: {name: child}}
onExit:
  - {name: cleanup, container: {command: [x], artifacts: {outputs: [{name: log}]}}}
artifacts:
  - {name: Model, from: train.model}
  - {name: model, from: train.model}
  - {name: model, from: train.model}
  - {name: a}
  - {name: b, from: "{{ params.x }}.model"}
  - {name: c, from: trainmodel}
  - {name: d, from: nope.model}
  - {name: e, from: cleanup.log}
  - {name: f, from: sweep.model}
  - {name: g, from: train.weights}
  - {name: h, from: ok.model}
  - {name: i, from: subs.model}
`, []want{
			{"artifacts[0].name", `"Model" is not an artifact name`},
			{"artifacts[2].name", `"model" is declared twice`},
			{"artifacts[3].from", "required"},
			{"artifacts[4].from", "templates are not supported"},
			{"artifacts[5].from", `"trainmodel" is not a reference`},
			{"artifacts[6].from", `no step named "nope"`},
			{"artifacts[7].from", `"cleanup" is an exit handler`},
			{"artifacts[9].from", `step "train" declares no output artifact named "weights"`},
			{"artifacts[10].from", `step "ok" declares no output artifact named "model"`},
			{"artifacts[11].from", `step "subs" is a forEach of pipeline steps`},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkProblems(t, problemsOf(t, Validate(mustParse(t, tc.src), localOpts)), tc.wants)
		})
	}
}

func TestReadingAPipelineStepsArtifactDependsOnIt(t *testing.T) {
	p := mustParse(t, `
steps:
  - {name: evaluate, container: {command: [x], artifacts: {inputs: [{name: m, from: sub.model}]}}}
  - {name: sub, kind: pipeline, pipeline: {name: child}}
`)
	if err := Validate(p, localOpts); err != nil {
		t.Fatal(err)
	}
	if got := Dependencies(p); !reflect.DeepEqual(got, [][]int{{1}, {}}) {
		t.Fatalf("dependencies %v, want evaluate on sub", got)
	}
}

func TestCheckChildArtifacts(t *testing.T) {
	child := mustParse(t, `
steps: [{name: fit, container: {command: [x], artifacts: {outputs: [{name: model}, {name: metrics}]}}}]
artifacts:
  - {name: model, from: fit.model}
  - {name: metrics, from: fit.metrics}
`)
	none := mustParse(t, `steps: [{name: fit, container: {command: [x]}}]`)
	parent := mustParse(t, `
steps:
  - {name: sub, kind: pipeline, pipeline: {name: trainer}}
  - {name: other, kind: pipeline, pipeline: {name: plain, version: 2}}
  - name: use
    container:
      command: [x]
      artifacts:
        inputs:
          - {name: a, from: sub.model}
          - {name: b, from: sub.modle}
          - {name: c, from: other.model}
          - {name: d, model: "m@champion"}
  - {name: promote, kind: promote, promote: {model: m, alias: x, from: sub.weights}}
onExit:
  - {name: promote-too, kind: promote, promote: {model: m, alias: staging, from: other.model}}
artifacts:
  - {name: model, from: sub.model}
  - {name: lost, from: sub.lost}
`)
	if err := Validate(parent, localOpts); err != nil {
		t.Fatal(err)
	}
	refs := ChildRefs(parent)
	checkProblems(t, CheckChildArtifacts(parent, refs[0], child), []want{
		{"artifacts[1].from", `step "sub" runs pipeline "trainer", which exports no artifact "lost"; it exports "model", "metrics"`},
		{"steps[2].container.artifacts.inputs[1].from", `exports no artifact "modle" (did you mean "model"?)`},
		{"steps[3].promote.from", `exports no artifact "weights"`},
	})
	checkProblems(t, CheckChildArtifacts(parent, refs[1], none), []want{
		{"onExit[0].promote.from", `step "other" runs pipeline "plain" version 2, which exports no artifact "model" (it exports none`},
		{"steps[2].container.artifacts.inputs[2].from", `step "other" runs pipeline "plain" version 2`},
	})
}

// TestChildArtifactExamples keeps examples/pipelines/train-model-artifact.yaml
// and evaluate-trained.yaml valid for the local runtime, and what the
// parent reads of the child's artifacts exported by it.
func TestChildArtifactExamples(t *testing.T) {
	load := func(name string) *Spec {
		data, err := os.ReadFile("../examples/pipelines/" + name)
		if err != nil {
			t.Fatal(err)
		}
		p := mustParse(t, string(data))
		if err := Validate(p, localOpts); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return p
	}
	child, parent := load("train-model-artifact.yaml"), load("evaluate-trained.yaml")
	refs := ChildRefs(parent)
	if len(refs) != 1 || refs[0].Name != "train-model-artifact" {
		t.Fatalf("refs %+v", refs)
	}
	if ps := append(CheckChildStep(refs[0], &parent.Steps[refs[0].Step], child), CheckChildArtifacts(parent, refs[0], child)...); len(ps) > 0 {
		t.Fatalf("evaluate-trained does not fit train-model-artifact: %+v", ps)
	}
	if got := child.ExportNames(); !reflect.DeepEqual(got, []string{"model", "dataset"}) {
		t.Fatalf("exports %v", got)
	}
}
