package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/api/gen"
)

// decodeProblems finds every value of doc that does not decode into type
// t, with its JSON path under prefix: a strict json.Decoder stops at the
// first bad value and cannot say where a custom type (a duration such as
// "soon") failed. It walks the document beside the type: objects field by
// field (unknown fields are problems too), arrays element by element, and
// decodes each leaf on its own.
//
// rest is doc without its problems, which decodes into t: unknown fields
// and fields whose value does not decode are removed (as if absent), and
// array elements that do not decode are replaced by their type's zero
// value (so indices do not move). The caller can validate what the user
// wrote correctly and report those problems with these.
func decodeProblems(doc json.RawMessage, t reflect.Type, prefix string) (problems []gen.FieldError, rest json.RawMessage) {
	rest = walkDecode(doc, t, prefix, &problems)
	if rest == nil {
		rest = zeroJSON(t)
	}
	return problems, rest
}

// walkDecode returns doc without its problems, or nil when doc itself does
// not decode.
func walkDecode(doc json.RawMessage, t reflect.Type, path string, out *[]gen.FieldError) json.RawMessage {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	trimmed := bytes.TrimSpace(doc)
	if bytes.Equal(trimmed, []byte("null")) {
		return doc
	}
	leaf := func() json.RawMessage {
		v := reflect.New(t).Interface()
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			*out = append(*out, gen.FieldError{Path: orBody(path), Message: specDecodeMessage(err)})
			return nil
		}
		return doc
	}
	_, custom := reflect.New(t).Interface().(json.Unmarshaler)
	switch {
	case custom:
		return leaf()
	case t.Kind() == reflect.Struct && len(trimmed) > 0 && trimmed[0] == '{':
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(doc, &fields); err != nil {
			return leaf()
		}
		byName := map[string]reflect.StructField{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			byName[name] = f
		}
		kept := map[string]json.RawMessage{}
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			f, ok := byName[k]
			if !ok {
				*out = append(*out, gen.FieldError{Path: join(path, k), Message: fmt.Sprintf("unknown field %q", k)})
				continue
			}
			if v := walkDecode(fields[k], f.Type, join(path, k), out); v != nil {
				kept[k] = v
			}
		}
		return marshalRest(kept)
	case t.Kind() == reflect.Slice && len(trimmed) > 0 && trimmed[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(doc, &items); err != nil {
			return leaf()
		}
		for i, it := range items {
			if items[i] = walkDecode(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out); items[i] == nil {
				items[i] = zeroJSON(t.Elem())
			}
		}
		return marshalRest(items)
	default:
		return leaf()
	}
}

// marshalRest re-encodes an object or array of values that each came from
// valid JSON, which cannot fail.
func marshalRest(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

// zeroJSON is the JSON of t's zero value ("0s" for a duration, where null
// would not decode).
func zeroJSON(t reflect.Type) json.RawMessage {
	b, err := json.Marshal(reflect.Zero(t).Interface())
	if err != nil {
		return json.RawMessage("null")
	}
	return b
}

// covers reports whether a problem at path also accounts for one at p: the
// same value, or one inside it ("rollout.canary" covers
// "rollout.canary.steps[1]").
func covers(path, p string) bool {
	return p == path || strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[")
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func orBody(path string) string {
	if path == "" {
		return "body"
	}
	return path
}
