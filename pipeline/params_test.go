package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestResolveParams(t *testing.T) {
	p := mustParse(t, `
params:
  - {name: dataset, type: string, default: iris}
  - {name: epochs, type: integer, default: 3}
  - {name: lr, type: number}
  - {name: dry_run, type: boolean, default: false}
  - {name: extra, type: object, default: {a: 1}}
  - {name: rates, type: array, default: [0.01]}
steps:
  - {name: a, container: {command: [x]}}
`)
	cases := []struct {
		name  string
		given map[string]any
		want  map[string]any
		probs []want
	}{
		{"defaults fill the rest", map[string]any{"lr": 0.1},
			map[string]any{"dataset": "iris", "epochs": 3.0, "lr": 0.1, "dry_run": false, "extra": map[string]any{"a": 1.0}, "rates": []any{0.01}}, nil},
		{"given values win and numbers become float64", map[string]any{
			"lr": json.Number("0.5"), "epochs": json.Number("10"), "dataset": "mnist", "dry_run": true,
			"extra": map[string]any{"n": json.Number("2")}, "rates": []any{int64(1)}},
			map[string]any{"dataset": "mnist", "epochs": 10.0, "lr": 0.5, "dry_run": true, "extra": map[string]any{"n": 2.0}, "rates": []any{1.0}}, nil},
		{"Go ints are accepted for integer", map[string]any{"lr": 1, "epochs": 7},
			map[string]any{"dataset": "iris", "epochs": 7.0, "lr": 1.0, "dry_run": false, "extra": map[string]any{"a": 1.0}, "rates": []any{0.01}}, nil},
		{"null means not given", map[string]any{"lr": 0.1, "epochs": nil},
			map[string]any{"dataset": "iris", "epochs": 3.0, "lr": 0.1, "dry_run": false, "extra": map[string]any{"a": 1.0}, "rates": []any{0.01}}, nil},
		{"missing required", nil, nil, []want{{"params.lr", "required param (no default) has no value"}}},
		{"null for a required param", map[string]any{"lr": nil}, nil, []want{{"params.lr", "required"}}},
		{"every problem, sorted by path", map[string]any{
			"lr": "fast", "epochs": 2.5, "dataset": 1.0, "dry_run": "yes", "extra": []any{}, "rates": map[string]any{},
			"epoch": 1.0, "zzz": true},
			nil, []want{
				{"params.dataset", "must be a string, got number 1"},
				{"params.dry_run", `must be true or false, got string "yes"`},
				{"params.epoch", `unknown param "epoch" (did you mean "epochs"?)`},
				{"params.epochs", "must be a whole number, got number 2.5"},
				{"params.extra", "must be an object, got a list"},
				{"params.lr", `must be a number, got string "fast"`},
				{"params.rates", "must be a list, got an object"},
				{"params.zzz", `unknown param "zzz"`},
			}},
		{"integer from json.Number must be whole", map[string]any{"lr": 1.0, "epochs": json.Number("1.5")},
			nil, []want{{"params.epochs", "must be a whole number"}}},
		{"odd names are quoted in paths", map[string]any{"lr": 1.0, "a.b": 1.0},
			nil, []want{{`params["a.b"]`, "unknown param"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ResolveParams(p, tc.given)
			if tc.probs != nil {
				checkProblems(t, problemsOf(t, err), tc.probs)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ResolveParams (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("result does not alias defaults or input", func(t *testing.T) {
		given := map[string]any{"lr": 0.1, "rates": []any{1.0}}
		got, err := ResolveParams(p, given)
		if err != nil {
			t.Fatal(err)
		}
		got["extra"].(map[string]any)["a"] = 99.0
		got["rates"].([]any)[0] = 99.0
		if p.Params[4].Default.(map[string]any)["a"] != 1.0 || given["rates"].([]any)[0] != 1.0 {
			t.Error("ResolveParams result aliases its inputs")
		}
	})
}
