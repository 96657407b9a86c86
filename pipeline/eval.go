package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Env is what expressions see while a run executes. The workflow builds it
// from resolved params and the outputs of finished steps; it is plain data so
// it can be rebuilt identically on replay.
type Env struct {
	Params map[string]any
	// Steps holds finished steps by name. Only steps the current step
	// depends on need to be present.
	Steps map[string]StepEnv
	// Item is the current forEach element; meaningful only when HasItem,
	// since nil is itself a valid element.
	Item    any
	HasItem bool
	Run     RunEnv
	// Limits is the evaluation budget; nil means the workflow's
	// (MaxEvalSteps, MaxEvalBytes). Activities that evaluate over a wide
	// forEach's outputs pass ActivityLimits.
	Limits *Limits
}

// Limits bound one evaluation (see budget.go).
type Limits struct {
	Steps, Bytes int
}

// ActivityLimits is the budget of expressions evaluated in an activity
// over the outputs of a wide forEach (up to MaxForEachItems entries): ten
// times the workflow's loop iterations, so that a reducer can make about
// 100 passes over 100,000 items, and 64 MiB, so that a list of 100,000
// strings of a few hundred bytes can be built. It is larger than the
// workflow's because the evaluation runs once, in an activity with a
// timeout, where exceeding it fails one step instead of every worker that
// replays a workflow task; it stays bounded for the same reason the
// workflow's is: a shared worker process.
var ActivityLimits = &Limits{Steps: 10 * MaxEvalSteps, Bytes: 64 << 20}

// StepEnv is one finished step as seen by expressions.
type StepEnv struct {
	// Outputs is the object the step wrote (map[string]any), or for a
	// forEach step a []any with one entry per item, in item order. nil is
	// treated as an empty object, so a step that wrote nothing gives
	// "has no key" errors rather than null dereferences.
	Outputs any
}

// RunEnv identifies the run, for templates such as "/data/{{ run.id }}".
// Exit handlers (Pipeline.OnExit) also see how the run is about to end.
type RunEnv struct {
	ID, Project, Pipeline string
	// Exit is set for exit handlers: State, FailedSteps and Error are
	// then run.state, run.failedSteps and run.error.
	Exit        bool
	State       string
	FailedSteps []string
	Error       string
}

// exprEnv builds the map the compiled programs expect (see compileEnv).
func (e Env) exprEnv() map[string]any {
	params := e.Params
	if params == nil {
		params = map[string]any{}
	}
	steps := make(map[string]any, len(e.Steps))
	for name, s := range e.Steps {
		out := s.Outputs
		if out == nil {
			out = map[string]any{}
		}
		steps[name] = map[string]any{"outputs": out}
	}
	var item any
	if e.HasItem {
		item = e.Item
	}
	return map[string]any{
		"params": params,
		"steps":  steps,
		"item":   item,
		"run":    e.Run.exprEnv(),
	}
}

func (r RunEnv) exprEnv() map[string]any {
	m := map[string]any{"id": r.ID, "project": r.Project, "pipeline": r.Pipeline}
	if r.Exit {
		failed := make([]any, len(r.FailedSteps))
		for i, n := range r.FailedSteps {
			failed[i] = n
		}
		m["state"], m["failedSteps"], m["error"] = r.State, failed, r.Error
	}
	return m
}

// EvalWhen evaluates a step's when condition. An empty condition is true, so
// the workflow can call it for every step. Anything but a boolean result is
// an error rather than being coerced, because a truthy string or number is
// almost always a mistake in the spec.
func EvalWhen(expr string, env Env) (bool, error) {
	if strings.TrimSpace(expr) == "" {
		return true, nil
	}
	// Validation compiled it with AsBool to reject statically non-boolean
	// conditions; at run time AsBool would coerce null to false, so the type
	// is checked here instead.
	v, err := runExpr(expr, modeValue, env)
	if err != nil {
		return false, fmt.Errorf("when %q: %w", expr, err)
	}
	b, ok := v.(bool)
	if !ok {
		return false, fmt.Errorf("when %q: must evaluate to true or false, got %s", expr, describeValue(v))
	}
	return b, nil
}

// SkipItem evaluates a forEach's per-item condition (ForEach.When) for the
// item in env: a non-empty result is the message of an item that is
// SKIPPED; an error fails the item alone, as a template error does.
func SkipItem(when string, env Env) (string, error) {
	if strings.TrimSpace(when) == "" {
		return "", nil
	}
	ok, err := EvalWhen(when, env)
	if err != nil {
		return "", fmt.Errorf("forEach.%w", err)
	}
	if !ok {
		return fmt.Sprintf("skipped: forEach.when %q is false for this item", when), nil
	}
	return "", nil
}

// EvalItems returns the elements a forEach step fans out over: the literal
// list as decoded from JSON (numbers as float64) or the value of the
// expression. More than MaxForEachItems is an error, since each item costs
// workflow history.
func EvalItems(fe *ForEach, env Env) ([]any, error) {
	if fe == nil {
		return nil, errors.New("forEach is missing")
	}
	form, items, src, err := parseItems(fe.Items)
	if err != nil {
		return nil, fmt.Errorf("forEach.items: %w", err)
	}
	if form == itemsExpr {
		v, err := runExpr(src, modeValue, env)
		if err != nil {
			return nil, fmt.Errorf("forEach.items %q: %w", src, err)
		}
		items, err = toList(v)
		if err != nil {
			return nil, fmt.Errorf("forEach.items %q: %w", src, err)
		}
	}
	if len(items) > MaxForEachItems {
		return nil, fmt.Errorf("forEach.items: %d items; the limit is %d", len(items), MaxForEachItems)
	}
	return items, nil
}

func toList(v any) ([]any, error) {
	if l, ok := v.([]any); ok {
		return l, nil
	}
	rv := reflect.ValueOf(v)
	if v == nil || (rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array) {
		return nil, fmt.Errorf("must evaluate to a list, got %s", describeValue(v))
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out, nil
}

// RenderString replaces each "{{ expr }}" in s with the expression's value:
// strings as is, numbers as JSON prints them (0.01, 3, 1e+21), booleans as
// true/false, null as "", and objects and lists as compact JSON with sorted
// keys (without HTML escaping, so "<" stays "<" in a shell argument). Text
// outside templates, including a stray "}}", is kept verbatim.
//
// Reading a key that does not exist (steps.a.outputs.acc when a wrote no
// "acc") is an error naming the path, so a typo fails the step with a clear
// message instead of rendering "". Use steps.a.outputs.acc ?? "default" or
// steps.a.outputs?.acc when a key is optional.
func RenderString(s string, env Env) (string, error) {
	if !strings.Contains(s, "{{") {
		return s, nil
	}
	segs, err := splitTemplate(s)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, sg := range segs {
		if !sg.isExpr {
			b.WriteString(sg.text)
			continue
		}
		v, err := runExpr(sg.text, modeValue, env)
		if err != nil {
			return "", fmt.Errorf("{{ %s }}: %w", sg.text, err)
		}
		str, err := formatValue(v)
		if err != nil {
			return "", fmt.Errorf("{{ %s }}: %w", sg.text, err)
		}
		b.WriteString(str)
		if b.Len() > MaxRenderedValue {
			return "", fmt.Errorf("{{ %s }}: the rendered value is %w: it exceeds %d KiB", sg.text, ErrBudget, MaxRenderedValue>>10)
		}
	}
	return b.String(), nil
}

// CheckRenderedSize fails when a rendered step (the value RenderContainer,
// RenderRay or RenderSpark returned) exceeds MaxRenderedStep: it travels in
// workflow history and activity payloads.
func CheckRenderedSize(rendered any) error {
	b, err := json.Marshal(rendered)
	if err != nil {
		return fmt.Errorf("rendered step: %w", err)
	}
	if len(b) > MaxRenderedStep {
		return fmt.Errorf("the rendered step is %w: %d KiB exceeds the limit of %d KiB", ErrBudget, len(b)>>10, MaxRenderedStep>>10)
	}
	return nil
}

func formatValue(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "", fmt.Errorf("cannot render %v", x)
		}
		return formatNumber(x), nil
	case float32:
		return formatValue(float64(x))
	case int:
		return strconv.Itoa(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case json.Number:
		return string(x), nil
	case time.Duration:
		return x.String(), nil
	case time.Time:
		return x.Format(time.RFC3339Nano), nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", fmt.Errorf("cannot render %T as JSON: %v", v, err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// renderArtifacts returns a with the templates of its inputs' artifact
// IDs and model references rendered (a itself when it has none: it is
// never modified).
func renderArtifacts(a *Artifacts, env Env) (*Artifacts, error) {
	if a == nil || !hasRefTemplates(a) {
		return a, nil
	}
	ra := *a
	ra.Inputs = slices.Clone(a.Inputs)
	for i := range ra.Inputs {
		in := &ra.Inputs[i]
		for _, f := range []*string{&in.Artifact, &in.Model, &in.URI} {
			if strings.Contains(*f, "{{") {
				v, err := RenderString(*f, env)
				if err != nil {
					return nil, fmt.Errorf("artifacts.inputs[%d]: %w", i, err)
				}
				*f = v
			}
		}
	}
	return &ra, nil
}

// RenderContainer returns a copy of c with templates in command, args, env
// values and workingDir rendered (image and resources are copied as they
// are). The input is not
// modified, so the spec held by the workflow stays intact across items and
// retries. The first error, in field order, is returned with its field name.
func RenderContainer(c *Container, env Env) (*Container, error) {
	if c == nil {
		return nil, errors.New("step has no container")
	}
	out := &Container{Image: c.Image, Secrets: slices.Clone(c.Secrets), Pod: c.Pod}
	var err error
	if out.Artifacts, err = renderArtifacts(c.Artifacts, env); err != nil {
		return nil, err
	}
	if c.Resources != nil {
		r := *c.Resources
		out.Resources = &r
	}
	list := func(name string, in []string) ([]string, error) {
		if in == nil {
			return nil, nil
		}
		res := make([]string, len(in))
		for i, s := range in {
			r, err := RenderString(s, env)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", name, i, err)
			}
			res[i] = r
		}
		return res, nil
	}
	if out.Image, err = RenderString(c.Image, env); err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	if out.Command, err = list("command", c.Command); err != nil {
		return nil, err
	}
	if out.Args, err = list("args", c.Args); err != nil {
		return nil, err
	}
	if c.Env != nil {
		names := make([]string, 0, len(c.Env))
		for k := range c.Env {
			names = append(names, k)
		}
		sort.Strings(names)
		out.Env = make(map[string]string, len(c.Env))
		for _, k := range names {
			r, err := RenderString(c.Env[k], env)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", key("env", k), err)
			}
			out.Env[k] = r
		}
	}
	if out.WorkingDir, err = RenderString(c.WorkingDir, env); err != nil {
		return nil, fmt.Errorf("workingDir: %w", err)
	}
	return out, nil
}
