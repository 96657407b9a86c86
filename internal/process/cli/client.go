package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
)

// ExitError ends the process with Code; main prints nothing more for it
// when Silent.
type ExitError struct {
	Code   int
	Err    error
	Silent bool
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// ProblemError is an API answer that is not a success: the gateway's
// problem+json, or the bare status when the body is not one.
type ProblemError struct {
	Status  int
	Problem gen.Problem
	// Lines maps a field error's path to its line in the file sent, when
	// the command knows it (pipelines push).
	Lines map[string]int
}

func (e *ProblemError) Error() string {
	var b strings.Builder
	p := e.Problem
	fmt.Fprintf(&b, "%s (%d)", first(p.Title, http.StatusText(e.Status)), e.Status)
	if p.Detail != nil && *p.Detail != "" {
		fmt.Fprintf(&b, ": %s", *p.Detail)
	}
	if p.Errors != nil {
		for _, fe := range *p.Errors {
			if line, ok := e.Lines[fe.Path]; ok {
				fmt.Fprintf(&b, "\n  line %d: %s: %s", line, fe.Path, fe.Message)
			} else {
				fmt.Fprintf(&b, "\n  %s: %s", fe.Path, fe.Message)
			}
		}
	}
	return b.String()
}

// session is a resolved target and a client for it.
type session struct {
	Context
	c *gen.ClientWithResponses
}

func (o *options) session() (*session, error) {
	t, err := o.target()
	if err != nil {
		return nil, err
	}
	// No overall timeout: follows and watches stream for as long as the
	// run lasts. Connecting is bounded.
	hc := &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		ResponseHeaderTimeout: 30 * time.Second,
	}}
	c, err := gen.NewClientWithResponses(strings.TrimRight(t.URL, "/"), gen.WithHTTPClient(hc),
		gen.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if t.Token != "" {
				req.Header.Set("Authorization", "Bearer "+t.Token)
			}
			req.Header.Set("User-Agent", "atelier-cli")
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("gateway URL %q: %w", t.URL, err)
	}
	return &session{Context: t, c: c}, nil
}

// unreachable is the error of a request that got no answer.
func unreachable(err error) error {
	return fmt.Errorf("cannot reach the gateway: %w", err)
}

// expect turns an answer into an error unless its status is one of want.
func expect(res *http.Response, body []byte, want ...int) error {
	if slices.Contains(want, res.StatusCode) {
		return nil
	}
	pe := &ProblemError{Status: res.StatusCode}
	if json.Unmarshal(body, &pe.Problem) != nil || pe.Problem.Title == "" {
		pe.Problem = gen.Problem{Title: http.StatusText(res.StatusCode), Status: res.StatusCode}
		if s := strings.TrimSpace(string(body)); s != "" && len(s) < 500 {
			pe.Problem.Detail = &s
		}
	}
	return pe
}

// isStatus reports whether err is an API answer with that status.
func isStatus(err error, status int) bool {
	var pe *ProblemError
	return errors.As(err, &pe) && pe.Status == status
}
