// Package redact replaces known secret values in text a step produced (its
// log, its outputs) with "[secret NAME]", before the text is stored or
// shown anywhere. It recognises values as they are, and each line of a
// multi-line value, of at least MinLength bytes; what a step transforms
// (encodes, splits, reverses) it cannot recognise.
package redact

import (
	"bytes"
	"io"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/runstate"
)

// MinLength is the shortest value redacted: shorter ones would blank out
// ordinary text.
const MinLength = 4

// Redactor replaces the values it was made with. A nil *Redactor changes
// nothing, so callers need not check.
type Redactor struct {
	r *strings.Replacer
}

// New redacts values (secret name → value), longest first so that a value
// containing another is redacted whole; nil when none is long enough.
func New(values map[string]string) *Redactor {
	type pair struct{ value, name string }
	var pairs []pair
	for name, v := range values {
		for _, part := range append([]string{v}, strings.Split(v, "\n")...) {
			part = strings.TrimRight(part, "\r")
			if len(part) >= MinLength {
				pairs = append(pairs, pair{part, name})
			}
		}
	}
	if len(pairs) == 0 {
		return nil
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if d := len(b.value) - len(a.value); d != 0 {
			return d
		}
		return strings.Compare(a.value, b.value)
	})
	args := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		args = append(args, p.value, "[secret "+p.name+"]")
	}
	return &Redactor{strings.NewReplacer(args...)}
}

// String redacts s.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	return r.r.Replace(s)
}

// Outputs redacts every string (keys included) inside a step's outputs.
func (r *Redactor) Outputs(m map[string]any) map[string]any {
	if r == nil || m == nil {
		return m
	}
	out, _ := r.value(m).(map[string]any)
	return out
}

// Metrics redacts the metrics' names (their values are numbers), as
// Outputs does keys: a name may hold whatever the step printed.
func (r *Redactor) Metrics(m *runstate.Metrics) *runstate.Metrics {
	if r == nil || m == nil {
		return m
	}
	out := &runstate.Metrics{}
	for k, v := range m.Scalars {
		if out.Scalars == nil {
			out.Scalars = map[string]float64{}
		}
		out.Scalars[r.String(k)] = v
	}
	for k, v := range m.Series {
		if out.Series == nil {
			out.Series = map[string][]float64{}
		}
		out.Series[r.String(k)] = v
	}
	return out
}

func (r *Redactor) value(v any) any {
	switch x := v.(type) {
	case string:
		return r.String(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.String(k)] = r.value(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.value(e)
		}
		return out
	}
	return v
}

// maxPendingLine bounds what a Writer holds while it waits for the end of
// a line: a longer line is redacted in pieces.
const maxPendingLine = 64 << 10

// Writer passes whole lines to w, redacted: a value is replaced even when
// the process wrote it in pieces, as long as it is on one line. Flush
// writes what is left at the end.
type Writer struct {
	w       io.Writer
	r       *Redactor
	pending []byte
}

// NewWriter returns a redacting writer to w (nil r: it passes text as is).
func NewWriter(w io.Writer, r *Redactor) *Writer { return &Writer{w: w, r: r} }

func (rw *Writer) Write(p []byte) (int, error) {
	if rw.r == nil {
		return rw.w.Write(p)
	}
	rw.pending = append(rw.pending, p...)
	for {
		i := bytes.IndexByte(rw.pending, '\n')
		if i < 0 {
			break
		}
		if _, err := io.WriteString(rw.w, rw.r.String(string(rw.pending[:i+1]))); err != nil {
			return len(p), err
		}
		rw.pending = rw.pending[i+1:]
	}
	if len(rw.pending) > maxPendingLine {
		rw.Flush()
	}
	return len(p), nil
}

// Flush writes what is left (a last line without its newline).
func (rw *Writer) Flush() {
	if len(rw.pending) > 0 {
		_, _ = io.WriteString(rw.w, rw.r.String(string(rw.pending)))
		rw.pending = nil
	}
}
