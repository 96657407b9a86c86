package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// SecretResolver opens a project's secrets by name (the vault). A name the
// project has no secret of is a catalog.ErrNotFound.
type SecretResolver interface {
	Resolve(ctx context.Context, project string, names []string) (map[string]string, error)
}

// WithSecrets lets steps reference project secrets (pipeline.SecretEnv),
// resolved through s just before their process starts. Without it a step
// that references one fails saying the worker has no secrets key.
func WithSecrets(s SecretResolver) Option { return func(r *Runner) { r.secrets = s } }

// minRedacted is the shortest value redacted from logs: shorter ones would
// blank out ordinary text (docs/api.md says so).
const minRedacted = 4

// resolveSecrets opens the secrets the step references. A missing secret
// or a worker without a key fails the step for good; a catalogue that
// cannot be reached is retried.
func (a *attempt) resolveSecrets(ctx context.Context) error {
	if len(a.req.Secrets) == 0 {
		return nil
	}
	if a.r.secrets == nil {
		return temporal.NewNonRetryableApplicationError(
			"the step references secrets but this worker has no secrets key (ATELIER_SECRETS_KEY_URL)", activities.ErrTypeInvalidStep, nil)
	}
	names := make([]string, 0, len(a.req.Secrets))
	for _, s := range a.req.Secrets {
		if !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	values, err := a.r.secrets.Resolve(ctx, a.req.Project, names)
	if errors.Is(err, catalog.ErrNotFound) {
		return temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeInvalidStep, nil)
	}
	if err != nil {
		return fmt.Errorf("resolving the step's secrets: %w", err)
	}
	a.secretEnv = make([]string, 0, len(a.req.Secrets))
	for _, s := range a.req.Secrets {
		a.secretEnv = append(a.secretEnv, s.Env+"="+values[s.Name])
	}
	a.redact = newRedaction(values)
	return nil
}

// redaction replaces known secret values in text with "[secret NAME]".
type redaction struct {
	r *strings.Replacer
}

// newRedaction redacts each value (and each line of a multi-line one) of
// at least minRedacted bytes, longest first so that a value containing
// another is redacted whole. nil when there is nothing to redact.
func newRedaction(values map[string]string) *redaction {
	type pair struct{ value, name string }
	var pairs []pair
	for name, v := range values {
		for _, part := range append([]string{v}, strings.Split(v, "\n")...) {
			part = strings.TrimRight(part, "\r")
			if len(part) >= minRedacted {
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
	return &redaction{strings.NewReplacer(args...)}
}

func (r *redaction) string(s string) string {
	if r == nil {
		return s
	}
	return r.r.Replace(s)
}

// value redacts every string inside a JSON-like value (a step's outputs).
func (r *redaction) value(v any) any {
	if r == nil {
		return v
	}
	switch x := v.(type) {
	case string:
		return r.string(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[r.string(k)] = r.value(e)
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

// maxPendingLine bounds what the redacting writer holds while it waits for
// the end of a line: a longer line is redacted in pieces.
const maxPendingLine = 64 << 10

// redactingWriter passes whole lines to w, redacted: a value is replaced
// even when the process wrote it in pieces, as long as it is on one line.
type redactingWriter struct {
	w       io.Writer
	r       *redaction
	pending []byte
}

// writer returns w itself when there is nothing to redact (no cost for
// steps without secrets), else a redacting writer to Flush at the end.
func (r *redaction) writer(w io.Writer) io.Writer {
	if r == nil {
		return w
	}
	return &redactingWriter{w: w, r: r}
}

func (rw *redactingWriter) Write(p []byte) (int, error) {
	rw.pending = append(rw.pending, p...)
	for {
		i := bytes.IndexByte(rw.pending, '\n')
		if i < 0 {
			break
		}
		if _, err := io.WriteString(rw.w, rw.r.string(string(rw.pending[:i+1]))); err != nil {
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
func (rw *redactingWriter) Flush() {
	if len(rw.pending) > 0 {
		_, _ = io.WriteString(rw.w, rw.r.string(string(rw.pending)))
		rw.pending = nil
	}
}
