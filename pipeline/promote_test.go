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

// A promote step names one item's artifact of a forEach step as
// "<step>[<index>].<artifact>", the index a number or a template: it then
// depends on that step; a forEach's artifact without an index, an index
// on a step that is no forEach, an index that is not a number and an
// artifact the step does not declare are problems at the from's path.
func TestPromoteFromAForEachItem(t *testing.T) {
	for _, tc := range []struct{ from, step, idx, art string }{
		{"train.model", "train", "", "model"},
		{"train[2].model", "train", "2", "model"},
		{"train[{{ steps.pick.outputs.best }}].model", "train", "{{ steps.pick.outputs.best }}", "model"},
	} {
		step, idx, art, item, ok := SplitPromoteFrom(tc.from)
		if !ok || step != tc.step || idx != tc.idx || art != tc.art || item != (tc.idx != "") {
			t.Errorf("SplitPromoteFrom(%q) = %q %q %q %t %t", tc.from, step, idx, art, item, ok)
		}
	}
	if _, _, _, _, ok := SplitPromoteFrom("[1].model"); ok {
		t.Error("an index without a step")
	}
	p, err := Parse([]byte(`
steps:
  - name: train
    forEach: {items: [a, b, c]}
    container:
      command: [sh, -c, "true"]
      artifacts:
        outputs: [{name: model}]
  - {name: pick, container: {command: [sh, -c, "true"]}}
  - name: first
    kind: promote
    promote: {model: s, alias: first, from: "train[0].model"}
  - name: best
    kind: promote
    promote: {model: s, alias: champion, from: "train[{{ steps.pick.outputs.best }}].model"}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, ValidateOptions{Kinds: []StepKind{KindContainer}}); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	deps := Dependencies(p)
	if !slices.Equal(deps[2], []int{0}) || !slices.Equal(deps[3], []int{0, 1}) {
		t.Errorf("dependencies %v: first waits for train, best for train and pick", deps)
	}

	bad, err := Parse([]byte(`
steps:
  - name: train
    forEach: {items: [a, b]}
    container:
      command: [sh, -c, "true"]
      artifacts:
        outputs: [{name: model}]
  - {name: single, container: {command: [sh, -c, "true"], artifacts: {outputs: [{name: model}]}}}
  - {name: a, kind: promote, promote: {model: s, alias: c, from: "train.model"}}
  - {name: b, kind: promote, promote: {model: s, alias: c, from: "single[0].model"}}
  - {name: c, kind: promote, promote: {model: s, alias: c, from: "train[-1].model"}}
  - {name: d, kind: promote, promote: {model: s, alias: c, from: "train[x].model"}}
  - {name: e, kind: promote, promote: {model: s, alias: c, from: "train[{{ params.i }}].weights"}}
  - {name: f, kind: promote, promote: {model: s, alias: c, from: "nope[0].model"}}
params: [{name: i, type: string, default: "0"}]
`))
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, problemsOf(t, Validate(bad, ValidateOptions{Kinds: []StepKind{KindContainer}})), []want{
		{"steps[2].promote.from", `promote one item's as train[<index>].model`},
		{"steps[3].promote.from", `step "single" is not a forEach: name its artifact as single.model`},
		{"steps[4].promote.from", `item index "-1" is not a number`},
		{"steps[5].promote.from", `item index "x" is not a number`},
		{"steps[6].promote.from", `step "train" declares no output artifact "weights"`},
		{"steps[7].promote.from", `unknown step "nope"`},
	})
}
