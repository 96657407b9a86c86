package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
)

// ResolveParams checks the values given when a run starts against the
// pipeline's declared params and fills in defaults, so the workflow starts
// from a complete, typed set. Every problem (unknown name, missing required
// value, wrong type) is reported at once, with paths such as "params.lr".
//
// A null value counts as not given, so clients that send every field can
// still fall back to defaults. Numbers are returned as float64 whatever
// their input form (json.Number, int, float64) because that is what they
// become after the input crosses Temporal's JSON payloads; keeping the same
// form before and after makes rendering identical on replay. Integer params
// must be whole numbers. Objects and arrays are deep-copied, so the result
// never aliases the pipeline's defaults or the caller's map.
func ResolveParams(p *Spec, given map[string]any) (map[string]any, error) {
	var ps problems
	declared := map[string]bool{}
	var names []string
	for _, prm := range p.Params {
		if !declared[prm.Name] {
			declared[prm.Name] = true
			names = append(names, prm.Name)
		}
	}
	givenNames := make([]string, 0, len(given))
	for k := range given {
		givenNames = append(givenNames, k)
	}
	sort.Strings(givenNames)
	for _, k := range givenNames {
		if !declared[k] {
			msg := fmt.Sprintf("unknown param %q", k)
			if s := suggest(k, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			ps.add(key("params", k), "%s", msg)
		}
	}

	out := make(map[string]any, len(p.Params))
	done := map[string]bool{}
	for _, prm := range p.Params {
		if done[prm.Name] {
			continue
		}
		done[prm.Name] = true
		path := key("params", prm.Name)
		v, ok := given[prm.Name]
		if !ok || v == nil {
			if prm.Default == nil {
				ps.add(path, "required param (no default) has no value")
				continue
			}
			v = prm.Default
		}
		if msg := valueTypeError(prm.Type, v); msg != "" {
			ps.add(path, "%s", msg)
			continue
		}
		out[prm.Name] = normalizeValue(v)
	}
	if len(ps.list) > 0 {
		sort.SliceStable(ps.list, func(i, j int) bool { return ps.list[i].Path < ps.list[j].Path })
		return nil, ps.err()
	}
	return out, nil
}

// toNumber accepts every numeric form a JSON decoder or Go caller may use.
func toNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case float32:
		return float64(n), true
	case int:
		return float64(n), true
	case int8:
		return float64(n), true
	case int16:
		return float64(n), true
	case int32:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint:
		return float64(n), true
	case uint8:
		return float64(n), true
	case uint16:
		return float64(n), true
	case uint32:
		return float64(n), true
	case uint64:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// valueTypeError returns "" when v is a valid value of type t, otherwise a
// message for a Problem.
func valueTypeError(t ParamType, v any) string {
	switch t {
	case ParamString:
		if _, ok := v.(string); ok {
			return ""
		}
		return "must be a string, got " + describeValue(v)
	case ParamInteger:
		f, ok := toNumber(v)
		if !ok {
			return "must be an integer, got " + describeValue(v)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) || f != math.Trunc(f) {
			return "must be a whole number, got " + describeValue(v)
		}
		return ""
	case ParamNumber:
		f, ok := toNumber(v)
		if !ok {
			return "must be a number, got " + describeValue(v)
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return "must be a finite number"
		}
		return ""
	case ParamBoolean:
		if _, ok := v.(bool); ok {
			return ""
		}
		return "must be true or false, got " + describeValue(v)
	case ParamObject:
		if _, ok := v.(map[string]any); ok {
			return ""
		}
		return "must be an object, got " + describeValue(v)
	case ParamArray:
		if _, ok := v.([]any); ok {
			return ""
		}
		return "must be a list, got " + describeValue(v)
	}
	return fmt.Sprintf("param type %q is unknown", t)
}

func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return fmt.Sprintf("string %q", x)
	case bool:
		return strconv.FormatBool(x)
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	if f, ok := toNumber(v); ok {
		return "number " + formatNumber(f)
	}
	return fmt.Sprintf("%T", v)
}

// normalizeValue converts numbers to float64 and deep-copies containers.
func normalizeValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = normalizeValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeValue(e)
		}
		return out
	case string, bool, nil:
		return v
	}
	if f, ok := toNumber(v); ok {
		return f
	}
	return v
}

// formatNumber prints a float the way encoding/json does (0.01, 3, 1e+21),
// so a number renders the same in a template as in JSON outputs.
func formatNumber(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	b, _ := json.Marshal(f)
	return string(b)
}
