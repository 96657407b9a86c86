package pipeline

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func testEnv() Env {
	return Env{
		Params: map[string]any{
			"dataset": "iris", "epochs": 3.0, "lr": 0.01, "big": 1e21, "flag": true,
			"obj": map[string]any{"b": 1.0, "a": []any{"x", "<y>"}}, "list": []any{1.0, 2.0, 3.0},
			"none": nil, "s": "text",
		},
		Steps: map[string]StepEnv{
			"prepare": {Outputs: map[string]any{"rows": 150.0, "path": "/data/x", "meta": map[string]any{"k": "v"}}},
			"train":   {Outputs: []any{map[string]any{"accuracy": 0.9}, map[string]any{"accuracy": 0.7}}},
			"empty":   {},
		},
		Item:    map[string]any{"lr": 0.1, "name": "b"},
		HasItem: true,
		Run:     RunEnv{ID: "run-1", Project: "proj", Pipeline: "pipe"},
	}
}

func TestRenderString(t *testing.T) {
	cases := []struct {
		name, in, want, err string
	}{
		{"no template", "plain }} text {", "plain }} text {", ""},
		{"string", "--data={{ params.dataset }}", "--data=iris", ""},
		{"whole float prints as integer", "{{ params.epochs }}", "3", ""},
		{"small float", "{{ params.lr }}", "0.01", ""},
		{"large float uses exponent", "{{ params.big }}", "1e+21", ""},
		{"int literal", "{{ 2 + 3 }}", "5", ""},
		{"arithmetic on floats", "{{ params.epochs * 2 }}", "6", ""},
		{"bool", "{{ params.flag }}/{{ !params.flag }}", "true/false", ""},
		{"null is empty", "[{{ params.none }}]", "[]", ""},
		{"object is compact JSON with sorted keys, no HTML escaping", "{{ params.obj }}", `{"a":["x","<y>"],"b":1}`, ""},
		{"list", "{{ params.list }}", "[1,2,3]", ""},
		{"several templates", "{{ run.id }}/{{ run.project }}/{{ run.pipeline }}", "run-1/proj/pipe", ""},
		{"item member", "lr={{ item.lr }} name={{ item.name }}", "lr=0.1 name=b", ""},
		{"outputs", "{{ steps.prepare.outputs.rows }} rows at {{ steps.prepare.outputs.path }}", "150 rows at /data/x", ""},
		{"nested outputs", "{{ steps.prepare.outputs.meta.k }}", "v", ""},
		{"forEach outputs are a list", "{{ steps.train.outputs[1].accuracy }} {{ max(map(steps.train.outputs, .accuracy)) }}", "0.7 0.9", ""},
		{"map literal with nested braces", `{{ {"a": {"b": 1}} }}`, `{"a":{"b":1}}`, ""},
		{"braces inside strings", `{{ "}}" + "{{" }}`, "}}{{", ""},
		{"literal braces escape", `{{ "{{" }} x }}`, "{{ x }}", ""},
		{"JSON text around a template", `{"lr": {{ params.lr }}}`, `{"lr": 0.01}`, ""},
		{"sorted keys()", "{{ keys(params.obj) }} {{ values({'b': 2, 'a': 1}) }}", `["a","b"] [1,2]`, ""},
		{"missing key with ?? default", "{{ steps.prepare.outputs.acc ?? 'n/a' }}", "n/a", ""},
		{"missing key with ?.", "[{{ steps.prepare.outputs?.acc }}]", "[]", ""},
		{"in operator", "{{ 'acc' in steps.prepare.outputs }}", "false", ""},
		{"step without outputs is an empty object", "{{ len(steps.empty.outputs) }}", "0", ""},

		{"missing key is an error", "x {{ steps.prepare.outputs.acc }}", "", `{{ steps.prepare.outputs.acc }}: steps.prepare.outputs has no key "acc"`},
		{"missing nested key", "{{ steps.prepare.outputs.meta.z }}", "", `steps.prepare.outputs.meta has no key "z"`},
		{"missing item key", "{{ item.lrate }}", "", `item has no key "lrate"`},
		{"key on a forEach list", "{{ steps.train.outputs.accuracy }}", "", "steps.train.outputs is a list; index it with a number (e.g. steps.train.outputs[0])"},
		{"index out of range", "{{ steps.train.outputs[2] }}", "", "steps.train.outputs has no index 2 (length 2)"},
		{"step that has not run", "{{ steps.deploy.outputs.x }}", "", `outputs of step "deploy" are not available`},
		{"member of a number", "{{ steps.prepare.outputs.rows.x }}", "", "steps.prepare.outputs.rows is number 150; cannot read x"},
		{"member of null", "{{ params.none.x }}", "", "params.none is null; cannot read x"},
		{"unclosed", "{{ params.lr", "", `"{{" is not closed`},
		{"empty", "{{}}", "", "empty template"},
		{"compile error", "{{ 1 + }}", "", "unexpected token"},
		{"not renderable", "{{ 1.0 / 0 }}", "", "cannot render +Inf"},
	}
	env := testEnv()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RenderString(tc.in, env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("RenderString(%q) = %q, %v; want error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("RenderString(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestEvalWhen(t *testing.T) {
	cases := []struct {
		expr string
		want bool
		err  string
	}{
		{"", true, ""},
		{"  ", true, ""},
		{"steps.train.outputs[0].accuracy >= 0.8", true, ""},
		{"steps.train.outputs[1].accuracy >= 0.8", false, ""},
		{"params.flag && params.dataset == 'iris'", true, ""},
		{"len(params.list) > 5 || run.id startsWith 'run-'", true, ""},
		{"(steps.prepare.outputs.acc ?? 0) > 0.5", false, ""},
		{"steps.prepare.outputs.acc > 0.5", false, `steps.prepare.outputs has no key "acc"`},
		{"params.s", false, "must evaluate to true or false"},
		{"params.none", false, "must evaluate to true or false, got null"},
		{"1 +", false, "unexpected token"},
	}
	env := testEnv()
	for _, tc := range cases {
		t.Run(tc.expr, func(t *testing.T) {
			got, err := EvalWhen(tc.expr, env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("EvalWhen = %v, %v; want error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("EvalWhen = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestEvalItems(t *testing.T) {
	cases := []struct {
		name  string
		items string
		want  []any
		err   string
	}{
		{"literal", `[0.01, "a", {"k": 1}, null]`, []any{0.01, "a", map[string]any{"k": 1.0}, nil}, ""},
		{"empty literal", `[]`, []any{}, ""},
		{"expression", `"params.list"`, []any{1.0, 2.0, 3.0}, ""},
		{"expression over outputs", `"map(steps.train.outputs, .accuracy)"`, []any{0.9, 0.7}, ""},
		{"typed slice result", `"1..3"`, []any{1, 2, 3}, ""},
		{"not a list", `"params.dataset"`, nil, `must evaluate to a list, got string "iris"`},
		{"null result", `"params.none"`, nil, "must evaluate to a list, got null"},
		{"too many from expression", `"1..100001"`, nil, "100001 items; the limit is 100000"},
		{"too many literal", "[" + strings.Repeat("0,", MaxForEachItems) + "0]", nil, "the limit is 100000"},
		{"neither", `{"a": 1}`, nil, "must be a list or an expression string"},
		{"missing key", `"steps.prepare.outputs.files"`, nil, `steps.prepare.outputs has no key "files"`},
	}
	env := testEnv()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EvalItems(&ForEach{Items: json.RawMessage(tc.items)}, env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("EvalItems = %v, %v; want error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("EvalItems: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("EvalItems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRenderContainer(t *testing.T) {
	in := &Container{
		Image:      "trainer-{{ item.name }}:{{ params.epochs }}",
		Command:    []string{"train", "--data={{ params.dataset }}"},
		Args:       []string{"--lr={{ item.lr }}"},
		Env:        map[string]string{"ROWS": "{{ steps.prepare.outputs.rows }}", "PLAIN": "x"},
		WorkingDir: "/work/{{ run.id }}",
	}
	orig := *in
	origEnv := map[string]string{"ROWS": in.Env["ROWS"], "PLAIN": "x"}
	origCmd := append([]string(nil), in.Command...)

	out, err := RenderContainer(in, testEnv())
	if err != nil {
		t.Fatal(err)
	}
	want := &Container{
		Image:      "trainer-b:3",
		Command:    []string{"train", "--data=iris"},
		Args:       []string{"--lr=0.1"},
		Env:        map[string]string{"ROWS": "150", "PLAIN": "x"},
		WorkingDir: "/work/run-1",
	}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("RenderContainer (-want +got):\n%s", diff)
	}
	if in.WorkingDir != orig.WorkingDir || in.Image != orig.Image || !reflect.DeepEqual(in.Env, origEnv) || !reflect.DeepEqual(in.Command, origCmd) {
		t.Error("RenderContainer modified its input")
	}

	t.Run("error names the field", func(t *testing.T) {
		bad := &Container{Command: []string{"x"}, Env: map[string]string{"B": "{{ params.nope }}", "A": "{{ item.nope }}"}}
		_, err := RenderContainer(bad, testEnv())
		// Env keys are rendered in sorted order, so A fails first.
		if err == nil || !strings.HasPrefix(err.Error(), `env.A: {{ item.nope }}: item has no key "nope"`) {
			t.Fatalf("err = %v", err)
		}
		_, err = RenderContainer(&Container{Command: []string{"x", "{{ params.nope }}"}}, testEnv())
		if err == nil || !strings.HasPrefix(err.Error(), "command[1]: ") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("nil container", func(t *testing.T) {
		if _, err := RenderContainer(nil, testEnv()); err == nil {
			t.Fatal("want error")
		}
	})
}

// TestEvalConcurrent exercises the program cache from many goroutines (run
// with -race).
func TestEvalConcurrent(t *testing.T) {
	env := testEnv()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if s, err := RenderString("{{ params.epochs + 1 }}-{{ item.lr }}", env); err != nil || s != "4-0.1" {
					t.Errorf("got %q, %v", s, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
