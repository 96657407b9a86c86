package pipeline

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestOnExitValid(t *testing.T) {
	p := mustParse(t, `
steps:
  - name: train
    container: {command: [sh, -c, "echo '{\"model\": \"m\"}' > $ATELIER_OUTPUTS/outputs.json"]}
onExitTimeout: 2m
onExit:
  - name: notify
    container:
      command: [echo, "{{ run.state }} {{ join(run.failedSteps, ',') }} {{ run.error }} {{ steps.train?.outputs?.model ?? 'none' }}"]
  - name: cleanup
    dependsOn: [notify]
    runIf: allDone
    container: {command: [echo, "{{ steps.notify.outputs.x ?? '' }}"]}
`)
	if err := Validate(p, localOpts); err != nil {
		t.Fatal(err)
	}
	if got := p.ExitTimeout(); got != 2*time.Minute {
		t.Errorf("ExitTimeout = %s", got)
	}
	// Exit handlers depend on each other, never on the pipeline's steps.
	deps := Dependencies(p.ExitPipeline())
	if len(deps) != 2 || len(deps[0]) != 0 || !slices.Equal(deps[1], []int{0}) {
		t.Errorf("exit dependencies = %v, want [[] [0]]", deps)
	}
	if (&Spec{}).ExitTimeout() != DefaultOnExitTimeout {
		t.Error("default exit timeout")
	}
	// The pipeline's steps an exit handler reads are numbered after the
	// exit handlers' own (the workflow finds wide outputs through them).
	refs := ReferencesWithin(p.ExitPipeline(), []string{"train"}, RefWhen|RefItems|RefTemplates)
	if len(refs) != 2 || !slices.Equal(refs[0], []int{2}) || !slices.Equal(refs[1], []int{0}) {
		t.Errorf("exit references = %v, want [[2] [0]]", refs)
	}
	if refs := ReferencesWithin(p.ExitPipeline(), []string{"train"}, RefDependsOn); !slices.Equal(refs[1], []int{0}) || len(refs[0]) != 0 {
		t.Errorf("exit dependsOn references = %v, want [[] [0]]", refs)
	}
}

func TestOutputsReferences(t *testing.T) {
	p := mustParse(t, `
steps:
  - {name: a, container: {command: [x]}}
  - {name: b, container: {command: [x]}}
  - {name: c, container: {command: [x]}}
outputs:
  total: "{{ sum(map(steps.c.outputs, .v)) }}"
  label: "{{ params.x ?? 'x' }} of {{ steps.a.outputs.n }}"
`)
	if got := OutputsReferences(p); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("OutputsReferences = %v, want [0 2]", got)
	}
}

func TestOnExitProblems(t *testing.T) {
	p := mustParse(t, `
steps:
  - name: train
    container: {command: ["echo {{ run.state }}"]}
onExitTimeout: 48h
onExit:
  - name: train
    container: {command: ["true"]}
  - name: notify
    dependsOn: [train]
    container: {command: ["true"]}
  - name: gate
    kind: approval
  - name: a
    dependsOn: [b]
    container: {command: ["true"]}
  - name: b
    container: {command: ["{{ steps.a.outputs.x }} {{ run.status }}"]}
  - name: a
    container: {command: ["true"]}
`)
	checkProblems(t, problemsOf(t, Validate(p, localOpts)), []want{
		{"steps[0].container.command[0]", "run.state is known only once the run ends: use it in onExit steps"},
		{"onExitTimeout", "longer than the limit of 24h0m0s"},
		{"onExit[0].name", `step name "train" is also steps[0]`},
		{"onExit[1].dependsOn[0]", "dependsOn may name only other onExit steps"},
		{"onExit[2].kind", "an approval step cannot be an exit handler"},
		{"onExit[3]", "dependency cycle: a -> b -> a"},
		{"onExit[4].container.command[0]", `unknown run field "status"; run has id, project, pipeline, state, failedSteps and error`},
		{"onExit[5].name", `duplicate step name "a" (also onExit[3])`},
	})
}

func TestOnExitTimeoutWithoutHandlers(t *testing.T) {
	p := mustParse(t, "steps: [{name: a, container: {command: [\"true\"]}}]\nonExitTimeout: 1m\n")
	checkProblems(t, problemsOf(t, Validate(p, localOpts)), []want{{"onExitTimeout", "this pipeline has none"}})
}

func TestOnExitCountsTowardsMaxSteps(t *testing.T) {
	p := &Spec{}
	for i := 0; i < MaxSteps; i++ {
		p.Steps = append(p.Steps, Step{Name: "s" + strconv.Itoa(i), Container: &Container{Command: []string{"true"}}})
	}
	p.OnExit = []Step{{Name: "cleanup", Container: &Container{Command: []string{"true"}}}}
	got := problemsOf(t, Validate(p, localOpts))
	if len(got) == 0 || got[0].Path != "steps" {
		t.Fatalf("problems %v, want the step limit", got)
	}
}

func TestOnExitRunEnv(t *testing.T) {
	env := Env{Run: RunEnv{ID: "r1", Exit: true, State: "FAILED", FailedSteps: []string{"a", "b"}, Error: `step "a" failed`}}
	got, err := RenderString("{{ run.state }}:{{ join(run.failedSteps, ',') }}:{{ len(run.failedSteps) }}:{{ run.error }}", env)
	if err != nil {
		t.Fatal(err)
	}
	if want := `FAILED:a,b:2:step "a" failed`; got != want {
		t.Errorf("rendered %q, want %q", got, want)
	}
	// A step that did not succeed is absent: optional reads say so.
	if got, err := RenderString("{{ steps.prepare?.outputs?.scratch ?? 'none' }}", env); err != nil || got != "none" {
		t.Errorf("optional read of an absent step: %q, %v", got, err)
	}
	// Outside exit handlers the fields are absent (validation refuses them).
	if _, err := RenderString("{{ run.state }}", Env{Run: RunEnv{ID: "r1"}}); err == nil {
		t.Error("run.state rendered outside an exit handler")
	}
}

// TestOnExitExample keeps examples/pipelines/on-exit.yaml valid for the
// local runtime.
func TestOnExitExample(t *testing.T) {
	data, err := os.ReadFile("../examples/pipelines/on-exit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, localOpts); err != nil {
		t.Fatal(err)
	}
}
