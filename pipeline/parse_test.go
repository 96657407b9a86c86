package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

const richYAML = `
name: rich
description: every feature once
deadline: 2h
params:
  - name: dataset
    type: string
    default: iris
  - name: epochs
    type: integer
    default: 3
  - name: lr
    type: number
  - name: dry_run
    type: boolean
    default: false
  - name: extra
    type: object
    default: {a: 1}
  - name: rates
    type: array
    default: [0.01, 0.1]
steps:
  - name: prepare
    kind: container
    timeout: 10m
    retries: {limit: 3, backoff: 2s, maxBackoff: 1m, factor: 1.5}
    container:
      image: busybox
      command: [sh, -c]
      args: ['echo {{ params.dataset }} > "$ATELIER_OUTPUTS"']
      env: {RUN: "{{ run.id }}-{{ run.project }}-{{ run.pipeline }}"}
      workingDir: /tmp/{{ run.id }}
  - name: train
    dependsOn: [prepare]
    forEach: {items: "params.rates", parallelism: 2}
    container:
      command: [train, "--lr={{ item }}", "--epochs={{ params.epochs }}"]
  - name: sweep
    forEach: {items: [1, "two", {three: 3}]}
    container:
      command: [echo, "{{ item }}", "{{ steps.prepare.outputs.rows }}"]
  - name: deploy
    when: '!params.dry_run && steps.train.outputs[0].accuracy > 0.5'
    container:
      command: [deploy]
`

const richJSON = `{
  "name": "rich",
  "description": "every feature once",
  "deadline": "2h",
  "params": [
    {"name": "dataset", "type": "string", "default": "iris"},
    {"name": "epochs", "type": "integer", "default": 3},
    {"name": "lr", "type": "number"},
    {"name": "dry_run", "type": "boolean", "default": false},
    {"name": "extra", "type": "object", "default": {"a": 1}},
    {"name": "rates", "type": "array", "default": [0.01, 0.1]}
  ],
  "steps": [
    {"name": "prepare", "kind": "container", "timeout": "10m",
     "retries": {"limit": 3, "backoff": "2s", "maxBackoff": "1m", "factor": 1.5},
     "container": {"image": "busybox", "command": ["sh", "-c"],
       "args": ["echo {{ params.dataset }} > \"$ATELIER_OUTPUTS\""],
       "env": {"RUN": "{{ run.id }}-{{ run.project }}-{{ run.pipeline }}"},
       "workingDir": "/tmp/{{ run.id }}"}},
    {"name": "train", "dependsOn": ["prepare"],
     "forEach": {"items": "params.rates", "parallelism": 2},
     "container": {"command": ["train", "--lr={{ item }}", "--epochs={{ params.epochs }}"]}},
    {"name": "sweep", "forEach": {"items": [1, "two", {"three": 3}]},
     "container": {"command": ["echo", "{{ item }}", "{{ steps.prepare.outputs.rows }}"]}},
    {"name": "deploy",
     "when": "!params.dry_run && steps.train.outputs[0].accuracy > 0.5",
     "container": {"command": ["deploy"]}}
  ]
}`

func canonical(t *testing.T, p *Spec) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParseRichRoundTrip(t *testing.T) {
	fromYAML := mustParse(t, richYAML)
	fromJSON := mustParse(t, richJSON)
	if a, b := canonical(t, fromYAML), canonical(t, fromJSON); a != b {
		t.Fatalf("YAML and JSON forms differ:\n%s\n%s", a, b)
	}
	for name, p := range map[string]*Spec{"yaml": fromYAML, "json": fromJSON} {
		if err := Validate(p, localOpts); err != nil {
			t.Errorf("%s: Validate: %v", name, err)
		}
	}

	p := fromYAML
	if got := p.Steps[0].Retries.Backoff.D(); got != 2*time.Second {
		t.Errorf("backoff = %v", got)
	}
	if p.Deadline.D() != 2*time.Hour || p.Steps[0].Timeout.D() != 10*time.Minute {
		t.Errorf("durations: deadline %v timeout %v", p.Deadline.D(), p.Steps[0].Timeout.D())
	}
	if got := string(p.Steps[1].ForEach.Items); got != `"params.rates"` {
		t.Errorf("items = %s", got)
	}
	if p.Params[1].Default != float64(3) {
		t.Errorf("integer default = %#v, want float64(3)", p.Params[1].Default)
	}

	// JSON -> Parse and YAML -> Parse give back the same pipeline.
	js := canonical(t, p)
	again := mustParse(t, js)
	if canonical(t, again) != js {
		t.Errorf("JSON round trip changed the pipeline:\n%s\n%s", js, canonical(t, again))
	}
	y, err := yaml.JSONToYAML([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if got := canonical(t, mustParse(t, string(y))); got != js {
		t.Errorf("YAML round trip changed the pipeline:\n%s\n%s", js, got)
	}
}

func TestParseProblems(t *testing.T) {
	cases := []struct {
		name  string
		input string
		want  []want
	}{
		{"unknown field with path", `
steps:
  - name: a
    container: {command: [x]}
  - name: b
    container: {comand: [x]}
`, []want{{"steps[1].container.comand", `unknown field "comand" (did you mean "command"?)`}}},
		{"all unknown fields in document order", `{
  "nmae": "x",
  "steps": [{"name": "a", "dependson": ["b"], "container": {"command": ["x"], "enviroment": {}}}],
  "extra": 1
}`, []want{
			{"nmae", `unknown field "nmae" (did you mean "name"?)`},
			{"steps[0].dependson", `unknown field "dependson" (did you mean "dependsOn"?)`},
			{"steps[0].container.enviroment", `unknown field "enviroment"`},
			{"extra", `unknown field "extra"`},
		}},
		{"field names are case-sensitive", `{"steps": [{"Name": "a"}]}`,
			[]want{{"steps[0].Name", `unknown field "Name" (did you mean "name"?)`}}},
		{"number where a string is expected (YAML)", `
steps:
  - name: a
    container: {command: [train, --epochs, 3]}
`, []want{{"steps[0].container.command[2]", "must be a string, got number 3 (quote it in YAML)"}}},
		{"YAML 1.1 booleans are not strings", "steps:\n  - name: no\n    container: {command: [x]}\n",
			[]want{{"steps[0].name", "must be a string, got false (quote it in YAML)"}}},
		{"YAML 1.1 boolean keys are not names", `
steps:
  - name: a
    container: {command: [x], env: {on: "1", Y: x, "n": ok}}
outputs:
  n: "{{ steps.a.outputs.x }}"
  "no": ok
`, []want{
			{"steps[0].container.env.on", `YAML reads the unquoted key on as the boolean true: quote it ("on") (line 4)`},
			{"steps[0].container.env.Y", `YAML reads the unquoted key Y as the boolean true: quote it ("Y")`},
			{"outputs.n", `YAML reads the unquoted key n as the boolean false: quote it ("n") (line 6)`},
		}},
		{"type errors (JSON)", `{"steps": [{"name": 1, "container": {"command": "x", "env": {"A": true}},
  "retries": {"limit": 1.5, "factor": "2"}, "forEach": [1], "timeout": 30}]}`, []want{
			{"steps[0].name", "must be a string, got number 1"},
			{"steps[0].container.command", `must be a list, got string "x"`},
			{"steps[0].container.env.A", "must be a string, got true"},
			{"steps[0].retries.limit", "must be a whole number in range, got 1.5"},
			{"steps[0].retries.factor", `must be a number, got string "2"`},
			{"steps[0].forEach", "must be an object, got a list"},
			{"steps[0].timeout", "must be a duration string"},
		}},
		{"bad duration", `{"deadline": "soon", "steps": []}`,
			[]want{{"deadline", `invalid duration "soon"`}}},
		{"negative duration", `{"deadline": "-1s", "steps": []}`,
			[]want{{"deadline", "must not be negative"}}},
		{"steps must be a list", `{"steps": {"a": {}}}`,
			[]want{{"steps", "must be a list, got an object"}}},
		{"duplicate key (JSON)", `{"name": "a", "name": "b", "steps": []}`,
			[]want{{"name", `duplicate field "name"`}}},
		{"duplicate key (YAML)", "name: a\nname: b\nsteps: []\n",
			[]want{{"", `invalid YAML: line 2: key "name" already set in map`}}},
		{"malformed JSON has line and column", "{\n  \"steps\": [\n    {\"name\": \"a\",}\n  ]\n}",
			[]want{{"", "invalid JSON at line 3, column 18"}}},
		{"truncated JSON", `{"steps": [`, []want{{"", "unexpected end of input"}}},
		{"trailing data", `{"steps": []} {}`, []want{{"", "unexpected data after the pipeline object"}}},
		{"malformed YAML has line", "steps:\n  - name: a\n   oops: x\n",
			[]want{{"", "invalid YAML: line 2"}}},
		{"not an object", "- a\n- b\n", []want{{"", "a pipeline must be an object"}}},
		{"empty", " \n\t", []want{{"", "spec is empty"}}},
		{"only a YAML comment", "# nothing\n", []want{{"", "spec is empty"}}},
		{"too large", `{"name": "` + strings.Repeat("x", MaxSpecBytes) + `"}`,
			[]want{{"", fmt.Sprintf("the limit is %d", MaxSpecBytes)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.input))
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", p)
			}
			if p != nil {
				t.Errorf("Parse returned a pipeline with an error")
			}
			checkProblems(t, problemsOf(t, err), tc.want)
		})
	}
}

func TestParseAcceptsNullsAndBOM(t *testing.T) {
	p := mustParse(t, "\xef\xbb\xbf"+`{"name": null, "steps": [{"name": "a", "retries": null, "container": {"command": ["x"], "args": null}}]}`)
	if p.Steps[0].Retries != nil || p.Steps[0].Container.Args != nil {
		t.Errorf("nulls should leave zero values: %+v", p.Steps[0])
	}
	if err := Validate(p, localOpts); err != nil {
		t.Error(err)
	}
}

func TestParseProblemsAreStable(t *testing.T) {
	in := []byte(`{"b": 1, "a": 2, "steps": [{"z": 1, "y": 2}], "c": 3}`)
	first := fmt.Sprint(problemsOf(t, func() error { _, err := Parse(in); return err }()))
	for i := 0; i < 20; i++ {
		_, err := Parse(bytes.Clone(in))
		if got := fmt.Sprint(problemsOf(t, err)); got != first {
			t.Fatalf("problem order changed:\n%s\n%s", first, got)
		}
	}
}
