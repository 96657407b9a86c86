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
func decodeProblems(doc json.RawMessage, t reflect.Type, prefix string) []gen.FieldError {
	var out []gen.FieldError
	walkDecode(doc, t, prefix, &out)
	return out
}

func walkDecode(doc json.RawMessage, t reflect.Type, path string, out *[]gen.FieldError) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	trimmed := bytes.TrimSpace(doc)
	if bytes.Equal(trimmed, []byte("null")) {
		return
	}
	leaf := func() {
		v := reflect.New(t).Interface()
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			*out = append(*out, gen.FieldError{Path: orBody(path), Message: specDecodeMessage(err)})
		}
	}
	_, custom := reflect.New(t).Interface().(json.Unmarshaler)
	switch {
	case custom:
		leaf()
	case t.Kind() == reflect.Struct && len(trimmed) > 0 && trimmed[0] == '{':
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(doc, &fields); err != nil {
			leaf()
			return
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
		for _, k := range slices.Sorted(maps.Keys(fields)) {
			f, ok := byName[k]
			if !ok {
				*out = append(*out, gen.FieldError{Path: join(path, k), Message: fmt.Sprintf("unknown field %q", k)})
				continue
			}
			walkDecode(fields[k], f.Type, join(path, k), out)
		}
	case t.Kind() == reflect.Slice && len(trimmed) > 0 && trimmed[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(doc, &items); err != nil {
			leaf()
			return
		}
		for i, it := range items {
			walkDecode(it, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	default:
		leaf()
	}
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
