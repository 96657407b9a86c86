package pipeline

import (
	"slices"
	"testing"
)

const promoteSpec = `
steps:
  - name: train
    container:
      command: [sh, -c, "true"]
      artifacts:
        outputs: [{name: model}]
  - name: evaluate
    container: {command: [sh, -c, "true"]}
  - name: promote
    kind: promote
    promote: {model: sentiment, alias: champion, from: train.model}
  - name: promote-winner
    kind: promote
    promote: {model: sentiment, alias: champion, from: "{{ steps.evaluate.outputs.best }}.model"}
  - name: pin
    kind: promote
    promote: {model: sentiment, alias: stable, version: "3"}
`

// A promote step is valid without a cluster, depends on the step whose
// artifact it registers (statically or through a template), and every
// mistake is reported at its path.
func TestPromoteSteps(t *testing.T) {
	p, err := Parse([]byte(promoteSpec))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, ValidateOptions{Kinds: []StepKind{KindContainer}}); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	deps := Dependencies(p)
	if !slices.Equal(deps[2], []int{0}) || !slices.Equal(deps[3], []int{1}) || len(deps[4]) != 0 {
		t.Errorf("dependencies %v: promote waits for train, promote-winner for evaluate, pin for nothing", deps)
	}

	bad, err := Parse([]byte(`
steps:
  - name: train
    forEach: {items: [1, 2]}
    container:
      command: [sh, -c, "true"]
      artifacts:
        outputs: [{name: model}]
  - name: a
    kind: promote
    promote: {model: Sentiment, alias: "{{ params.x }}", from: train.weights}
  - name: b
    kind: promote
    promote: {model: s, alias: c, from: nope.model, version: "2"}
  - name: c
    kind: promote
    promote: {model: s, alias: c, version: "two"}
    cache: {}
  - name: d
    kind: promote
    forEach: {items: [1]}
    promote: {model: s, alias: c, from: train.model}
  - name: e
    kind: promote
`))
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, problemsOf(t, Validate(bad, ValidateOptions{Kinds: []StepKind{KindContainer}})), []want{
		{"steps[1].promote.model", `"Sentiment": lowercase`},
		{"steps[1].promote.alias", "templates are not allowed"},
		{"steps[1].promote.from", `step "train" is a forEach`},
		{"steps[2].promote", "exactly one of from"},
		{"steps[3].cache", "cannot be cached"},
		{"steps[3].promote.version", `"two" is not a version number`},
		{"steps[4].forEach", "forEach does not apply"},
		{"steps[4].promote.from", `step "train" is a forEach`},
		{"steps[5].promote", "required for a promote step"},
	})
}
