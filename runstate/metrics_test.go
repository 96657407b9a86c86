package runstate

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	m, err := ParseMetrics([]byte(` {"accuracy": 0.93, "epochs": 3, "loss": [0.9, 0.5, 0.31], "empty": []} `))
	if err != nil {
		t.Fatal(err)
	}
	if m.Scalars["accuracy"] != 0.93 || m.Scalars["epochs"] != 3 || len(m.Scalars) != 2 {
		t.Errorf("scalars %v", m.Scalars)
	}
	if got := m.Series["loss"]; len(got) != 3 || got[2] != 0.31 || len(m.Series["empty"]) != 0 {
		t.Errorf("series %v", m.Series)
	}
	if m, err := ParseMetrics([]byte(`{}`)); m != nil || err != nil {
		t.Errorf("empty object: %v, %v", m, err)
	}
}

// Every problem at once, each with its path, in name order.
func TestParseMetricsReportsEveryProblem(t *testing.T) {
	_, err := ParseMetrics([]byte(`{"ok": 1, "acc": "high", "loss": [1, "x", null], "big": 1e999, "bad name": 1, "nested": {"a": 1}}`))
	var me *MetricsError
	if !errors.As(err, &me) {
		t.Fatalf("want a *MetricsError, got %v", err)
	}
	var paths []string
	for _, p := range me.Problems {
		paths = append(paths, p.Path+": "+p.Message)
	}
	want := []string{
		"acc: must be a number, not a string (or an array of numbers, for a series)",
		"bad name: invalid name",
		"big: 1e999 is out of range for a 64-bit float (or an array of numbers, for a series)",
		"loss[1]: must be a number, not a string",
		"loss[2]: must be a number, not null",
		"nested: must be a number, not an object (or an array of numbers, for a series)",
	}
	if len(paths) != len(want) {
		t.Fatalf("problems:\n%s", strings.Join(paths, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(paths[i], w) {
			t.Errorf("problem %d: %q, want %q…", i, paths[i], w)
		}
	}
	if !strings.HasPrefix(err.Error(), "metrics file (ATELIER_METRICS) is invalid: acc: ") {
		t.Errorf("message %q", err)
	}
}

func TestParseMetricsLimits(t *testing.T) {
	for name, doc := range map[string]string{
		"not an object": `[1, 2]`,
		"empty":         ``,
		"not JSON":      `{"a": 1`,
		"too large":     `{"a": [` + strings.Repeat("1,", MaxMetricsBytes/2) + `1]}`,
		"too many":      manyMetrics(MaxMetrics + 1),
		"long series":   `{"a": [` + strings.Repeat("1,", MaxSeriesPoints) + `1]}`,
	} {
		if _, err := ParseMetrics([]byte(doc)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := ParseMetrics([]byte(manyMetrics(MaxMetrics))); err != nil {
		t.Errorf("%d metrics: %v", MaxMetrics, err)
	}
}

func manyMetrics(n int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"m` + strconv.Itoa(i) + `": 1`)
	}
	b.WriteString("}")
	return b.String()
}
