package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/runstate"
)

// problemAt returns the message of the problem at path, or "".
func problemAt(p gen.Problem, path string) string {
	if p.Errors == nil {
		return ""
	}
	var msgs []string
	for _, e := range *p.Errors {
		if e.Path == path {
			msgs = append(msgs, e.Message)
		}
	}
	return strings.Join(msgs, "; ")
}

func TestPipelineStepsAreCheckedAgainstTheCatalogue(t *testing.T) {
	h := newHarness(t)
	push := func(secret, project, name, yaml string) resp {
		return h.do("POST", "/v1/projects/"+project+"/pipelines/"+name+"/versions", secret, yaml, "Content-Type", "application/yaml")
	}
	child := `
params:
  - {name: dataset, type: string}
  - {name: lr, type: number, default: 0.1}
steps: [{name: fit, container: {command: [x]}}]
outputs: {model: "m"}
`
	wantStatus(t, push(h.editor, "alpha", "train", child), http.StatusCreated)
	wantStatus(t, push(h.betaEditor, "beta", "secret", child), http.StatusCreated)

	// Every problem at once, with the spec's own.
	r := push(h.editor, "alpha", "parent", `
steps:
  - {name: a, kind: pipeline, pipeline: {name: train, params: {dataset: iris, lr: fast, epochs: 3}}}
  - {name: b, kind: pipeline, pipeline: {name: train}}
  - {name: c, kind: pipeline, pipeline: {name: train, version: 7, params: {dataset: x}}}
  - {name: d, kind: pipeline, pipeline: {name: secret, params: {dataset: x}}}
  - {name: e, kind: pipeline, pipeline: {name: train, params: {dataset: "{{ params.nope }}"}}}
`)
	p := wantProblem(t, r, http.StatusUnprocessableEntity, "invalid-spec")
	for path, want := range map[string]string{
		"steps[0].pipeline.params.lr":     `param "lr" of pipeline "train" must be a number`,
		"steps[0].pipeline.params.epochs": `pipeline "train" has no param "epochs"`,
		"steps[1].pipeline.params":        `pipeline "train" requires param "dataset"`,
		"steps[2].pipeline.version":       `pipeline "train" has no version 7 in project "alpha"`,
		// Another project's pipeline is not there: runs never cross projects.
		"steps[3].pipeline.name":           `pipeline "secret" not found in project "alpha"`,
		"steps[4].pipeline.params.dataset": `unknown param "nope"`,
	} {
		if got := problemAt(p, path); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q\n%s", path, got, want, r.body)
		}
	}

	ok := `
steps:
  - {name: a, kind: pipeline, pipeline: {name: train, version: 1, params: {dataset: "{{ run.id }}", lr: "{{ 0.5 }}"}}}
`
	wantStatus(t, push(h.editor, "alpha", "parent", ok), http.StatusCreated)
}

func TestPipelinesThatRunEachOtherAreRefused(t *testing.T) {
	h := newHarness(t)
	push := func(name, yaml string) resp {
		return h.do("POST", "/v1/projects/alpha/pipelines/"+name+"/versions", h.editor, yaml, "Content-Type", "application/yaml")
	}
	leaf := `steps: [{name: a, container: {command: [x]}}]`
	wantStatus(t, push("cc", leaf), http.StatusCreated)
	wantStatus(t, push("bb", `steps: [{name: call, kind: pipeline, pipeline: {name: cc}}]`), http.StatusCreated)
	wantStatus(t, push("aa", `steps: [{name: call, kind: pipeline, pipeline: {name: bb}}]`), http.StatusCreated)

	// cc → aa → bb → cc.
	r := push("cc", `steps: [{name: call, kind: pipeline, pipeline: {name: aa}}]`)
	p := wantProblem(t, r, http.StatusUnprocessableEntity, "invalid-spec")
	if got := problemAt(p, "steps[0].pipeline.name"); !strings.Contains(got, "cycle (cc → aa → bb → cc)") {
		t.Errorf("%q\n%s", got, r.body)
	}
	// Itself, as the newest version.
	r = push("self", `steps: [{name: again, kind: pipeline, pipeline: {name: self}}]`)
	p = wantProblem(t, r, http.StatusUnprocessableEntity, "invalid-spec")
	if got := problemAt(p, "steps[0].pipeline.name"); !strings.Contains(got, "cycle (self → self)") {
		t.Errorf("%q\n%s", got, r.body)
	}
	// A pinned older version of itself that runs nothing is no cycle.
	wantStatus(t, push("self", leaf), http.StatusCreated)
	wantStatus(t, push("self", `steps: [{name: old, kind: pipeline, pipeline: {name: self, version: 1}}]`), http.StatusCreated)
}

func TestRetryOfAChildRunIsRefused(t *testing.T) {
	h := newHarness(t)
	wantStatus(t, h.do("POST", "/v1/projects/alpha/pipelines/train/versions", h.editor, specJSON), http.StatusCreated)
	var run gen.Run
	r := h.do("POST", "/v1/projects/alpha/runs", h.editor, map[string]any{"pipeline": "train", "params": map[string]any{"epochs": 1}})
	wantStatus(t, r, http.StatusCreated)
	r.json(t, &run)
	h.eng.setStatus(runstate.Status{RunID: run.Id, Project: "alpha", Pipeline: "train", Version: 1, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Failed, Steps: []runstate.StepStatus{}, ParentRun: "parent-1", ParentStep: "sub"})
	p := wantProblem(t, h.do("POST", "/v1/projects/alpha/runs/"+run.Id+"/retry", h.editor, nil), http.StatusConflict, "not-retryable")
	if !strings.Contains(*p.Detail, "retry the parent run") {
		t.Errorf("%q", *p.Detail)
	}
}

// What a pipeline reads of a pipeline step's artifacts must be exported by
// the child as stored (the newest version, or the pinned one): a 422 at
// the reading field otherwise, with the spec's other problems.
func TestArtifactsReadFromAPipelineStepAreCheckedAgainstTheChild(t *testing.T) {
	h := newHarness(t)
	push := func(name, yaml string) resp {
		return h.do("POST", "/v1/projects/alpha/pipelines/"+name+"/versions", h.editor, yaml, "Content-Type", "application/yaml")
	}
	wantStatus(t, push("trainer", `steps: [{name: fit, container: {command: [x], artifacts: {outputs: [{name: model}]}}}]`), http.StatusCreated)
	wantStatus(t, push("trainer", `
steps: [{name: fit, container: {command: [x], artifacts: {outputs: [{name: model}]}}}]
artifacts: [{name: model, from: fit.model}]
`), http.StatusCreated)

	parent := `
steps:
  - {name: newest, kind: pipeline, pipeline: {name: trainer}}
  - {name: first, kind: pipeline, pipeline: {name: trainer, version: 1}}
  - name: evaluate
    container:
      command: [x]
      artifacts:
        inputs:
          - {name: a, from: newest.model}
          - {name: b, from: newest.weights}
          - {name: c, from: first.model}
artifacts: [{name: best, from: newest.model}]
`
	p := wantProblem(t, push("parent", parent), http.StatusUnprocessableEntity, "invalid-spec")
	for path, want := range map[string]string{
		"steps[2].container.artifacts.inputs[1].from": `step "newest" runs pipeline "trainer", which exports no artifact "weights"; it exports "model"`,
		"steps[2].container.artifacts.inputs[2].from": `step "first" runs pipeline "trainer" version 1, which exports no artifact "model" (it exports none`,
	} {
		if got := problemAt(p, path); !strings.Contains(got, want) {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	if n := len(*p.Errors); n != 2 {
		t.Errorf("%d problems, want 2: %+v", n, *p.Errors)
	}
	ok := strings.ReplaceAll(strings.ReplaceAll(parent, "newest.weights", "newest.model"), "first.model", "newest.model")
	wantStatus(t, push("parent", ok), http.StatusCreated)
}
