package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/schema"
)

// Parse decodes a pipeline from JSON or YAML. It is strict because a
// misspelled field silently ignored ("comand", "dependson") would otherwise
// produce a pipeline that runs but does something other than what was
// written. Every unknown field and type mismatch is reported with its path in
// one *ValidationError; a syntax error is reported alone (path "") since
// nothing after it can be trusted.
//
// Input whose first non-space byte is '{' is JSON, anything else YAML. Parse
// does not check semantics (names, references, cycles): call Validate.
func Parse(data []byte) (*Spec, error) {
	var ps problems
	if len(data) > MaxSpecBytes {
		ps.add("", "spec is %d bytes; the limit is %d", len(data), MaxSpecBytes)
		return nil, ps.err()
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // UTF-8 BOM
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 {
		ps.add("", "spec is empty")
		return nil, ps.err()
	}
	isYAML := trimmed[0] != '{'
	jsonData := data
	if isYAML {
		if boolKeys(data, &ps); len(ps.list) > 0 {
			return nil, ps.err()
		}
		j, err := yaml.YAMLToJSONStrict(data)
		if err != nil {
			ps.add("", "%s", yamlErrorMessage(err))
			return nil, ps.err()
		}
		jsonData = j
	}

	c := &strictChecker{data: jsonData, yaml: isYAML}
	c.dec = json.NewDecoder(bytes.NewReader(jsonData))
	c.dec.UseNumber()
	if err := c.top(); err != nil {
		// A syntax error makes earlier findings moot; report it alone.
		return nil, &schema.ValidationError{Subject: "pipeline", Problems: []schema.Problem{{Path: "", Message: err.Error()}}}
	}
	if len(c.ps.list) > 0 {
		return nil, c.ps.err()
	}

	var p Spec
	if err := json.Unmarshal(jsonData, &p); err != nil {
		// The strict walk should have caught everything the decoder rejects;
		// this keeps an unforeseen case from passing silently.
		ps.add(unmarshalErrorPath(err), "%s", err.Error())
		return nil, ps.err()
	}
	return &p, nil
}

// yamlErrorMessage strips library prefixes and folds multi-line messages so
// the problem reads as one line that still carries the YAML line number.
func yamlErrorMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "error converting YAML to JSON: ")
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	msg = strings.ReplaceAll(msg, "\n", " ")
	return "invalid YAML: " + msg
}

func unmarshalErrorPath(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	return ""
}

var (
	durationType = reflect.TypeOf(schema.Duration(0))
	rawType      = reflect.TypeOf(json.RawMessage(nil))
)

// strictChecker walks the JSON token stream alongside the Go type so that it
// sees keys in document order and duplicates, which a decode into generic
// maps would hide.
type strictChecker struct {
	dec  *json.Decoder
	data []byte
	yaml bool
	ps   problems
}

func (c *strictChecker) token() (json.Token, error) {
	tok, err := c.dec.Token()
	if err != nil {
		return nil, c.syntaxError(err)
	}
	return tok, nil
}

func (c *strictChecker) syntaxError(err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := lineCol(c.data, int(se.Offset))
		return fmt.Errorf("invalid JSON at line %d, column %d: %s", line, col, se.Error())
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		line, col := lineCol(c.data, len(c.data))
		return fmt.Errorf("invalid JSON at line %d, column %d: unexpected end of input", line, col)
	}
	return fmt.Errorf("invalid JSON: %s", err.Error())
}

func lineCol(data []byte, off int) (int, int) {
	if off > len(data) {
		off = len(data)
	}
	line, col := 1, 1
	for _, b := range data[:off] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}

func (c *strictChecker) top() error {
	tok, err := c.token()
	if err != nil {
		return err
	}
	if tok == nil {
		return errors.New("spec is empty")
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("a pipeline must be an object with a \"steps\" list, got %s", describeToken(tok))
	}
	if err := c.object(reflect.TypeOf(Spec{}), ""); err != nil {
		return err
	}
	if _, err := c.dec.Token(); err != io.EOF {
		if err != nil {
			return c.syntaxError(err)
		}
		line, col := lineCol(c.data, int(c.dec.InputOffset()))
		return fmt.Errorf("invalid JSON at line %d, column %d: unexpected data after the pipeline object", line, col)
	}
	return nil
}

type jsonField struct {
	name string
	typ  reflect.Type
}

// jsonFields lists a struct's fields under their JSON names, in declaration
// order (used for typo suggestions). The fields of an embedded struct without
// a JSON name are promoted, as encoding/json does (RayStep embeds
// RayClusterTemplate, so "image" is written directly under "ray"); a name
// declared by the outer struct wins over a promoted one.
func jsonFields(t reflect.Type) []jsonField {
	var out, promoted []jsonField
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, tagged := f.Tag.Lookup("json")
		n, _, _ := strings.Cut(tag, ",")
		if n == "-" {
			continue
		}
		if f.Anonymous && n == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				promoted = append(promoted, jsonFields(ft)...)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		name := f.Name
		if tagged && n != "" {
			name = n
		}
		out = append(out, jsonField{name: name, typ: f.Type})
	}
	for _, pf := range promoted {
		dup := false
		for _, f := range out {
			dup = dup || f.name == pf.name
		}
		if !dup {
			out = append(out, pf)
		}
	}
	return out
}

// object checks the members of an object whose '{' was already read.
func (c *strictChecker) object(t reflect.Type, path string) error {
	fields := jsonFields(t)
	names := make([]string, len(fields))
	for i, f := range fields {
		names[i] = f.name
	}
	seen := map[string]bool{}
	for c.dec.More() {
		kt, err := c.token()
		if err != nil {
			return err
		}
		k, _ := kt.(string)
		p := key(path, k)
		if seen[k] {
			c.ps.add(p, "duplicate field %q", k)
			if err := c.skip(); err != nil {
				return err
			}
			continue
		}
		seen[k] = true
		var ft reflect.Type
		for _, f := range fields {
			if f.name == k {
				ft = f.typ
			}
		}
		if ft == nil {
			msg := fmt.Sprintf("unknown field %q", k)
			if s := suggest(k, names); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			c.ps.add(p, "%s", msg)
			if err := c.skip(); err != nil {
				return err
			}
			continue
		}
		if err := c.value(ft, p); err != nil {
			return err
		}
	}
	_, err := c.token() // '}'
	return err
}

// skip consumes one value.
func (c *strictChecker) skip() error {
	tok, err := c.token()
	if err != nil {
		return err
	}
	return c.skipRest(tok)
}

// skipRest consumes the remainder of a value whose first token was read.
func (c *strictChecker) skipRest(tok json.Token) error {
	d, ok := tok.(json.Delim)
	if !ok || (d != '{' && d != '[') {
		return nil
	}
	depth := 1
	for depth > 0 {
		tok, err := c.token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{', '[':
				depth++
			default:
				depth--
			}
		}
	}
	return nil
}

// value checks one value against t, recording mismatches and moving on.
func (c *strictChecker) value(t reflect.Type, path string) error {
	start := c.dec.InputOffset()
	tok, err := c.token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil // null leaves the zero value, as encoding/json does
	}
	if t == rawType || t.Kind() == reflect.Interface {
		return c.skipRest(tok)
	}
	if t != durationType && customDecoded(t) {
		return c.custom(t, path, start, tok)
	}
	if t == durationType {
		s, ok := tok.(string)
		if !ok {
			c.mismatch(path, "a duration string such as \"90s\" or \"2h\"", tok)
			return c.skipRest(tok)
		}
		b, _ := json.Marshal(s)
		var d schema.Duration
		if err := d.UnmarshalJSON(b); err != nil {
			c.ps.add(path, "%s", err.Error())
		}
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	delim, _ := tok.(json.Delim)
	switch t.Kind() {
	case reflect.Struct:
		if delim != '{' {
			c.mismatch(path, "an object", tok)
			return c.skipRest(tok)
		}
		return c.object(t, path)
	case reflect.Slice:
		if delim != '[' {
			c.mismatch(path, "a list", tok)
			return c.skipRest(tok)
		}
		for i := 0; c.dec.More(); i++ {
			if err := c.value(t.Elem(), index(path, i)); err != nil {
				return err
			}
		}
		_, err := c.token() // ']'
		return err
	case reflect.Map:
		if delim != '{' {
			c.mismatch(path, "an object", tok)
			return c.skipRest(tok)
		}
		seen := map[string]bool{}
		for c.dec.More() {
			kt, err := c.token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			if seen[k] {
				c.ps.add(key(path, k), "duplicate key %q", k)
				if err := c.skip(); err != nil {
					return err
				}
				continue
			}
			seen[k] = true
			if err := c.value(t.Elem(), key(path, k)); err != nil {
				return err
			}
		}
		_, err := c.token() // '}'
		return err
	case reflect.String:
		if _, ok := tok.(string); !ok {
			c.mismatch(path, "a string", tok)
			return c.skipRest(tok)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, ok := tok.(json.Number)
		if !ok {
			c.mismatch(path, "a whole number", tok)
			return c.skipRest(tok)
		}
		if _, err := strconv.ParseInt(string(n), 10, t.Bits()); err != nil {
			c.ps.add(path, "must be a whole number in range, got %s", n)
		}
	case reflect.Float32, reflect.Float64:
		n, ok := tok.(json.Number)
		if !ok {
			c.mismatch(path, "a number", tok)
			return c.skipRest(tok)
		}
		if _, err := strconv.ParseFloat(string(n), t.Bits()); err != nil {
			c.ps.add(path, "number %s is out of range", n)
		}
	case reflect.Bool:
		if _, ok := tok.(bool); !ok {
			c.mismatch(path, "true or false", tok)
			return c.skipRest(tok)
		}
	default:
		return c.skipRest(tok)
	}
	return nil
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// customDecoded reports whether values of t decode through their own
// UnmarshalJSON (such as the endpoint spec's durations), which the
// token walk cannot judge by kind: an schema.Duration is an int64 that
// is written "90s".
func customDecoded(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return reflect.PointerTo(t).Implements(unmarshalerType)
}

// custom decodes one value of a type with its own UnmarshalJSON, whose
// first token was read after offset start, and records its error at path.
func (c *strictChecker) custom(t reflect.Type, path string, start int64, tok json.Token) error {
	if err := c.skipRest(tok); err != nil {
		return err
	}
	// start is the end of the previous token: drop the separator and
	// spaces before this value.
	raw := bytes.TrimLeft(c.data[start:c.dec.InputOffset()], " \t\r\n:,")
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if err := reflect.New(t).Interface().(json.Unmarshaler).UnmarshalJSON(raw); err != nil {
		c.ps.add(path, "%s", err.Error())
	}
	return nil
}

func (c *strictChecker) mismatch(path, want string, tok json.Token) {
	msg := fmt.Sprintf("must be %s, got %s", want, describeToken(tok))
	if c.yaml && want == "a string" {
		switch tok.(type) {
		case json.Number, bool:
			msg += " (quote it in YAML)"
		}
	}
	c.ps.add(path, "%s", msg)
}

func describeToken(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		if v == '{' {
			return "an object"
		}
		return "a list"
	case string:
		if len(v) > 40 {
			v = v[:40] + "…"
		}
		return fmt.Sprintf("string %q", v)
	case json.Number:
		return "number " + string(v)
	case bool:
		return strconv.FormatBool(v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}
