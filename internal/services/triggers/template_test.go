package triggers

import (
	"reflect"
	"strings"
	"testing"
)

func TestRenderParams(t *testing.T) {
	payload := map[string]any{
		"runId":   "r1",
		"params":  map[string]any{"lr": 0.25, "tags": []any{"a", "b"}},
		"steps":   map[string]any{"make": map[string]any{"outputs": map[string]any{"path": "/data/v7", "n": 3.0}}},
		"outputs": nil,
		"odd":     map[string]any{"a key": "x"},
	}
	got, err := RenderParams(map[string]any{
		"lr":      "{{ upstream.params.lr }}",
		"tags":    "{{upstream.params.tags}}",
		"first":   "{{ upstream.params.tags[1] }}",
		"path":    "{{ upstream.steps.make.outputs.path }}/train",
		"summary": "run {{ upstream.runId }}: n={{ upstream.steps.make.outputs.n }} tags={{ upstream.params.tags }}",
		"quoted":  `{{ upstream.odd["a key"] }}`,
		"nested":  map[string]any{"list": []any{"{{ upstream.runId }}", 1.0}},
		"plain":   "no templates",
		"number":  2.0,
	}, "upstream", payload)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"lr": 0.25, "tags": []any{"a", "b"}, "first": "b", "path": "/data/v7/train",
		"summary": `run r1: n=3 tags=["a","b"]`, "quoted": "x",
		"nested": map[string]any{"list": []any{"r1", 1.0}}, "plain": "no templates", "number": 2.0,
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %#v\nwant %#v", got, want)
	}

	for tmpl, wantErr := range map[string]string{
		"{{ upstream.nope }}":             `params.x: {{ upstream.nope }}: upstream has no "nope"`,
		"{{ upstream.params.tags[5] }}":   "upstream.params.tags has 2 elements",
		"{{ upstream.runId.x }}":          "upstream.runId is not an object",
		"{{ upstream.params[0] }}":        "upstream.params is not a list",
		"{{ body.x }}":                    `unknown name "body"`,
		"{{ upstream.params.lr * 2 }}":    "they are not expressions",
		"{{ len(upstream.params.tags) }}": "they are not expressions",
	} {
		_, err := RenderParams(map[string]any{"x": tmpl}, "upstream", payload)
		if err == nil || !strings.Contains(err.Error(), wantErr) {
			t.Errorf("%s: got %v, want %q", tmpl, err, wantErr)
		}
	}
}

func TestCheckParams(t *testing.T) {
	got := CheckParams(map[string]any{
		"ok":     "{{ body.ref }} and {{ body.items[0].name }}",
		"root":   "{{ upstream.x }}",
		"expr":   "{{ body.a + 1 }}",
		"open":   "{{ body.a ",
		"deep":   map[string]any{"l": []any{"{{ nope }}"}},
		"plain":  "x",
		"number": 1.0,
	}, "body")
	want := []string{"params.deep.l[0]", "params.expr", "params.open", "params.root"}
	var paths []string
	for p := range got {
		paths = append(paths, p)
	}
	if len(paths) != len(want) {
		t.Fatalf("problems %v, want paths %v", got, want)
	}
	for _, p := range want {
		if got[p] == "" {
			t.Errorf("no problem at %s (%v)", p, got)
		}
	}
	if !strings.Contains(got["params.root"], `unknown name "upstream"; this trigger's templates read body`) {
		t.Errorf("root: %s", got["params.root"])
	}
}
