package triggers

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// A trigger's params are JSON values whose strings may hold references to
// the firing's payload, {{ upstream.outputs.model }} or {{ body.ref }}:
// a root (Root), then .name and [index] steps. They are references, not
// expressions: what they read is all they can do, so a template from a
// tenant costs nothing to render and cannot fail for any reason but a
// missing value. A string that is one reference takes the value's type
// ({{ upstream.params.lr }} stays a number); references inside a longer
// string are written as text (strings as they are, other values as JSON).

var (
	refRe  = regexp.MustCompile(`\{\{\s*(.*?)\s*\}\}`)
	stepRe = regexp.MustCompile(`^(?:\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\["([^"]*)"\])`)
	rootRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)
)

// ref is one parsed reference: keys are strings (object members) or ints
// (list indexes).
type ref struct {
	text string
	root string
	path []any
}

func parseRef(s string) (ref, error) {
	r := ref{text: s}
	r.root = rootRe.FindString(s)
	if r.root == "" {
		return r, fmt.Errorf("{{ %s }}: a reference starts with a name, such as upstream or body", s)
	}
	rest := s[len(r.root):]
	for rest != "" {
		m := stepRe.FindStringSubmatch(rest)
		if m == nil {
			return r, fmt.Errorf("{{ %s }}: expected .name, [index] or [\"key\"] at %q (references read values; they are not expressions)", s, rest)
		}
		switch {
		case m[1] != "":
			r.path = append(r.path, m[1])
		case m[2] != "":
			n, err := strconv.Atoi(m[2])
			if err != nil {
				return r, fmt.Errorf("{{ %s }}: index %s: %w", s, m[2], err)
			}
			r.path = append(r.path, n)
		default:
			r.path = append(r.path, m[3])
		}
		rest = rest[len(m[0]):]
	}
	return r, nil
}

// CheckParams returns every problem of params' templates, by the path of
// the value in params ("params.x"), for a trigger whose payload is root.
func CheckParams(params map[string]any, root string) map[string]string {
	problems := map[string]string{}
	walkStrings("params", params, func(path, s string) {
		if strings.Count(s, "{{") != strings.Count(s, "}}") {
			problems[path] = "unbalanced {{ }}"
			return
		}
		for _, m := range refRe.FindAllStringSubmatch(s, -1) {
			r, err := parseRef(m[1])
			if err != nil {
				problems[path] = err.Error()
				return
			}
			if r.root != root {
				problems[path] = fmt.Sprintf("{{ %s }}: unknown name %q; this trigger's templates read %s", m[1], r.root, root)
				return
			}
		}
	})
	return problems
}

// RenderParams renders params' templates over payload (the value of
// root). A reference to a missing value is an error naming it.
func RenderParams(params map[string]any, root string, payload any) (map[string]any, error) {
	out, err := renderValue("params", params, root, payload)
	if err != nil {
		return nil, err
	}
	m, _ := out.(map[string]any)
	return m, nil
}

func renderValue(path string, v any, root string, payload any) (any, error) {
	switch x := v.(type) {
	case string:
		return renderString(path, x, root, payload)
	case map[string]any:
		out := make(map[string]any, len(x))
		for _, k := range sortedKeys(x) {
			r, err := renderValue(path+"."+k, x[k], root, payload)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := renderValue(fmt.Sprintf("%s[%d]", path, i), e, root, payload)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

func renderString(path, s, root string, payload any) (any, error) {
	ms := refRe.FindAllStringSubmatchIndex(s, -1)
	if len(ms) == 0 {
		return s, nil
	}
	if len(ms) == 1 && ms[0][0] == 0 && ms[0][1] == len(s) {
		return lookup(path, s[ms[0][2]:ms[0][3]], root, payload)
	}
	var b strings.Builder
	last := 0
	for _, m := range ms {
		b.WriteString(s[last:m[0]])
		v, err := lookup(path, s[m[2]:m[3]], root, payload)
		if err != nil {
			return nil, err
		}
		if str, ok := v.(string); ok {
			b.WriteString(str)
		} else {
			j, err := json.Marshal(v)
			if err != nil {
				return nil, fmt.Errorf("%s: {{ %s }}: %w", path, s[m[2]:m[3]], err)
			}
			b.Write(j)
		}
		last = m[1]
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

func lookup(path, text, root string, payload any) (any, error) {
	r, err := parseRef(text)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if r.root != root {
		return nil, fmt.Errorf("%s: {{ %s }}: unknown name %q", path, text, r.root)
	}
	v := payload
	at := root
	for _, k := range r.path {
		switch key := k.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: {{ %s }}: %s is not an object", path, text, at)
			}
			if v, ok = m[key]; !ok {
				return nil, fmt.Errorf("%s: {{ %s }}: %s has no %q", path, text, at, key)
			}
			at += "." + key
		case int:
			l, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("%s: {{ %s }}: %s is not a list", path, text, at)
			}
			if key >= len(l) {
				return nil, fmt.Errorf("%s: {{ %s }}: %s has %d elements", path, text, at, len(l))
			}
			v = l[key]
			at += fmt.Sprintf("[%d]", key)
		}
	}
	return v, nil
}

func walkStrings(path string, v any, f func(path, s string)) {
	switch x := v.(type) {
	case string:
		f(path, x)
	case map[string]any:
		for _, k := range sortedKeys(x) {
			walkStrings(path+"."+k, x[k], f)
		}
	case []any:
		for i, e := range x {
			walkStrings(fmt.Sprintf("%s[%d]", path, i), e, f)
		}
	}
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
