package pipeline

import (
	"errors"
	"strings"
	"testing"

	"github.com/atelier-ml/atelier/schema"
)

// problemsOf returns the problems of a *ValidationError, failing the test for
// any other non-nil error.
func problemsOf(t *testing.T, err error) []schema.Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	var ve *schema.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error is %T (%v), want *schema.ValidationError", err, err)
	}
	if len(ve.Problems) == 0 {
		t.Fatalf("schema.ValidationError without problems")
	}
	return ve.Problems
}

// want is an expected problem: exact path, message containing msg.
type want struct {
	path, msg string
}

// checkProblems asserts that got holds exactly the wanted problems, in order.
func checkProblems(t *testing.T, got []schema.Problem, wants []want) {
	t.Helper()
	ok := len(got) == len(wants)
	for i := 0; ok && i < len(wants); i++ {
		ok = got[i].Path == wants[i].path && strings.Contains(got[i].Message, wants[i].msg)
	}
	if !ok {
		var b strings.Builder
		for _, p := range got {
			b.WriteString("\n  " + p.Path + ": " + p.Message)
		}
		var w strings.Builder
		for _, p := range wants {
			w.WriteString("\n  " + p.path + ": …" + p.msg + "…")
		}
		t.Errorf("problems:%s\nwant:%s", b.String(), w.String())
	}
}

func mustParse(t *testing.T, src string) *Spec {
	t.Helper()
	p, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, src)
	}
	return p
}

var localOpts = ValidateOptions{Kinds: []StepKind{KindContainer}}
