package pipeline

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

func TestExpressionsOverBudgetFailCleanly(t *testing.T) {
	env := Env{Params: map[string]any{"s": strings.Repeat("y", 300<<10)}}
	for _, src := range []string{
		`repeat(repeat("x", 999999), 20000)`, // the template that killed every worker
		`reduce(1..40, #acc + #acc, "x")`,    // doubling by concatenation
		`len(map(1..100000, params.s))`,      // many copies of a large value
		`replace(repeat("a", 1000), "a", repeat("b", 10000))`,
		`join(map(1..20, params.s), ",")`,
		`len(map(1..1000, len(map(1..1000, len(map(1..1000, 1))))))`, // CPU: a billion iterations
		`reduce(1..30, concat(#acc, #acc), [1])`,
	} {
		t.Run(src, func(t *testing.T) {
			_, err := runExpr(src, modeValue, env)
			if err == nil {
				t.Fatal("evaluated; want a budget error")
			}
			if !strings.Contains(err.Error(), "budget") {
				t.Fatalf("error %q does not say the budget was exceeded", err)
			}
		})
	}
}

func TestMeteredOperationsKeepTheirResults(t *testing.T) {
	env := Env{Params: map[string]any{"lr": 0.1, "names": []any{"a", "b"}}}
	for _, tc := range []struct {
		src  string
		want string
	}{
		{`"a" + "b"`, "ab"},
		{`1 + 2`, "3"},
		{`params.lr + 1`, "1.1"},
		{`repeat("ab", 3)`, "ababab"},
		{`replace("a-b-c", "-", "+")`, "a+b+c"},
		{`join(params.names, ",")`, "a,b"},
		{`join(params.names)`, "ab"},
		{`map(1..3, # + 1)`, "[2,3,4]"},
		{`reduce(1..4, #acc + #, 0)`, "10"},
		{`filter(params.names, # + "x" == "bx")`, `["b"]`},
	} {
		v, err := runExpr(tc.src, modeValue, env)
		if err != nil {
			t.Errorf("%s: %v", tc.src, err)
			continue
		}
		if got, _ := formatValue(v); got != tc.want {
			t.Errorf("%s = %s, want %s", tc.src, got, tc.want)
		}
	}
	// Type errors are still found when the expression is compiled.
	if _, err := compileExpr(`1 + "a"`, modeValue); err == nil {
		t.Error(`1 + "a" compiled`)
	}
}

func TestRenderedSizeLimits(t *testing.T) {
	big := strings.Repeat("x", MaxRenderedValue)
	env := Env{Params: map[string]any{"big": big}}
	if _, err := RenderString("{{ params.big }}", env); err != nil {
		t.Fatalf("a value at the limit: %v", err)
	}
	_, err := RenderString("-{{ params.big }}", env)
	if !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "64 KiB") {
		t.Fatalf("over the value limit: %v", err)
	}
	c := &Container{Command: []string{"echo"}, Args: []string{"{{ params.big }}", "{{ params.big }}", "{{ params.big }}", "{{ params.big }}"}}
	r, err := RenderContainer(c, env)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckRenderedSize(r); !errors.Is(err, ErrBudget) || !strings.Contains(err.Error(), "256 KiB") {
		t.Fatalf("over the step limit: %v", err)
	}
}

func TestMeteredBuiltinsExist(t *testing.T) {
	// They replace expr builtins of the same name; an expr upgrade that
	// renamed one would silently drop the metering.
	for _, name := range meteredNames {
		if _, err := compileExpr(name+`("a", "b", "c")`, modeValue); err != nil && strings.Contains(err.Error(), "unknown") {
			t.Errorf("%s: %v", name, err)
		}
		if meteredBuiltins[name] == nil {
			t.Errorf("%s has no metered version", name)
		}
	}
}

func TestSpecsPastTemporalsHistoryLimitAreRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("steps:\n")
	items := "[" + strings.TrimSuffix(strings.Repeat("1,", WideThreshold), ",") + "]"
	for i := 0; i < 8; i++ { // 8 × 1,000 items × 6 events: 48,000
		b.WriteString("  - name: s" + strconv.Itoa(i) + "\n    forEach: {items: " + items + "}\n    container: {command: [echo]}\n")
	}
	p, err := Parse([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(p, ValidateOptions{})
	if err == nil || !strings.Contains(err.Error(), "51,200") {
		t.Fatalf("Validate() = %v, want a problem naming Temporal's history limit", err)
	}
	// Six such steps fit.
	p.Steps = p.Steps[:6]
	if err := Validate(p, ValidateOptions{}); err != nil {
		t.Fatalf("six steps of 1,000 items: %v", err)
	}
	// Past WideThreshold a step is wide: its items cost the run's history
	// per batch, so eight steps of 1,001 items fit easily.
	wide := "[" + strings.TrimSuffix(strings.Repeat("1,", WideThreshold+1), ",") + "]"
	b.Reset()
	b.WriteString("steps:\n")
	for i := 0; i < 8; i++ {
		b.WriteString("  - name: s" + strconv.Itoa(i) + "\n    forEach: {items: " + wide + "}\n    container: {command: [echo]}\n")
	}
	if p, err = Parse([]byte(b.String())); err != nil {
		t.Fatal(err)
	}
	if n := EstimateHistoryEvents(p); n > 300 {
		t.Errorf("EstimateHistoryEvents(8 wide steps) = %d, want per-batch costs (< 300)", n)
	}
	if err := Validate(p, ValidateOptions{}); err != nil {
		t.Fatalf("eight wide steps: %v", err)
	}
}

// A wide reducer evaluates in an activity with ActivityLimits: a sum over
// 100,000 items' outputs fits, and a runaway loop still stops.
func TestActivityLimits(t *testing.T) {
	outs := make([]any, MaxForEachItems)
	for i := range outs {
		outs[i] = map[string]any{"v": float64(i)}
	}
	env := Env{Steps: map[string]StepEnv{"square": {Outputs: outs}}, Limits: ActivityLimits}
	got, err := RenderString("{{ sum(map(steps.square.outputs, .v)) }}", env)
	if err != nil || got != "4999950000" {
		t.Fatalf("sum over 100,000 outputs = %q, %v", got, err)
	}
	// The workflow's budget would refuse 11 passes over the list; the
	// activity's takes them (its own bound, 10M, is the same meter).
	passes := func(n int) string {
		return "{{ " + strings.TrimSuffix(strings.Repeat("len(filter(steps.square.outputs, .v >= 0)) + ", n), " + ") + " }}"
	}
	env.Limits = nil
	if _, err := RenderString(passes(11), env); err == nil || !strings.Contains(err.Error(), "more than 1000000 loop iterations") {
		t.Fatalf("workflow budget: %v, want ErrBudget", err)
	}
	env.Limits = ActivityLimits
	if got, err := RenderString(passes(11), env); err != nil || got != "1100000" {
		t.Fatalf("activity budget: %q, %v", got, err)
	}
}
