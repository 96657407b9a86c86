package deploy

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/schema"
)

// scripted is an Endpoints whose Status answers come from a script (the
// last one repeats) and which records the calls that change something.
type scripted struct {
	mu       sync.Mutex
	statuses []func() (activities.EndpointStatus, error)
	calls    []string
	update   func() (inference.Revision, error)
}

func (s *scripted) Create(_ context.Context, _, name, _, _ string, _ inference.EndpointSpec) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "create "+name)
	return nil
}

func (s *scripted) Status(context.Context, string, string) (activities.EndpointStatus, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.statuses[0]
	if len(s.statuses) > 1 {
		s.statuses = s.statuses[1:]
	}
	return next()
}

func (s *scripted) UpdateSpec(_ context.Context, _, name string, _ inference.EndpointSpec) (inference.Revision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "update "+name)
	return s.update()
}

func found(st activities.EndpointStatus) func() (activities.EndpointStatus, error) {
	return func() (activities.EndpointStatus, error) { return st, nil }
}

func notFound() (activities.EndpointStatus, error) {
	return activities.EndpointStatus{}, endpointclient.ErrNotFound
}

// rollingOut is an endpoint whose revision 2 is a canary in progress.
func rollingOut() activities.EndpointStatus {
	return activities.EndpointStatus{Name: "chat", EndpointState: activities.EndpointState{
		Revisions: []inference.Revision{rev(1, "a"), rev(2, "b")}, Current: 2, Stable: 1,
		Rollout: canaryRollout(2, inference.StageCanaryPause, 0),
	}}
}

func promoted() activities.EndpointStatus {
	st := rollingOut()
	st.Rollout, st.Stable = nil, 2
	return st
}

func request() activities.DeployEndpointRequest {
	return activities.DeployEndpointRequest{Project: "p", Step: "deploy", Attempt: 1, Endpoint: "chat", Cluster: "gpu-a",
		Spec: inference.EndpointSpec{Backend: inference.BackendVLLM, Model: inference.Model{Name: "tiny"}, Image: "vllm"}, Timeout: time.Hour}
}

func run(t *testing.T, e Endpoints, req activities.DeployEndpointRequest, heartbeat *activities.DeployProgress, opts ...Option) (activities.DeployEndpointResult, error) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	if heartbeat != nil {
		env.SetHeartbeatDetails(*heartbeat)
	}
	// No reports by default: the test environment's client is a mock.
	a := New(e, nil, "local", append([]Option{WithPollInterval(time.Millisecond), WithProgressReporter(nil)}, opts...)...)
	env.RegisterActivity(a.Deploy)
	v, err := env.ExecuteActivity(a.Deploy, req)
	var res activities.DeployEndpointResult
	if err == nil {
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
	}
	return res, err
}

func appErr(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v is not an application error", err)
	}
	return ae
}

// A retried execution resumes the revision of its heartbeat: it sends
// nothing again, even when the endpoint has moved on since.
func TestRetriedExecutionWaitsForItsRevision(t *testing.T) {
	e := &scripted{statuses: []func() (activities.EndpointStatus, error){found(rollingOut()), found(promoted())}}
	started := time.Now().Add(-time.Minute)
	res, err := run(t, e, request(), &activities.DeployProgress{Revision: 2, StartedAt: started})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.calls) != 0 {
		t.Errorf("calls %q, want none", e.calls)
	}
	if res.Revision != 2 || !res.StartedAt.Equal(started) {
		t.Errorf("result %+v", res)
	}
}

// Without a heartbeat (lost with the worker) the same spec is sent again:
// the endpoint answers the revision already made.
func TestUpdateThenWait(t *testing.T) {
	e := &scripted{statuses: []func() (activities.EndpointStatus, error){found(rollingOut()), found(rollingOut()), found(promoted())},
		update: func() (inference.Revision, error) { return rev(2, "b"), nil }}
	var reported []string
	res, err := run(t, e, request(), nil, WithProgressReporter(func(_ context.Context, p activities.StepProgress) error {
		reported = append(reported, p.Message)
		return nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(e.calls, ",") != "update chat" || res.Revision != 2 || res.Created {
		t.Errorf("calls %q, result %+v", e.calls, res)
	}
	if strings.Join(reported, "|") != "revision 2: canary step 1 of 2: 20% of traffic" {
		t.Errorf("reported %q: want the stage once", reported)
	}
}

func TestCreateWhenMissing(t *testing.T) {
	first := promoted()
	first.Revisions, first.Stable, first.Current = first.Revisions[:1], 1, 1
	e := &scripted{statuses: []func() (activities.EndpointStatus, error){notFound, found(first)}}
	res, err := run(t, e, request(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(e.calls, ",") != "create chat" || res.Revision != 1 || !res.Created || res.Cluster != "gpu-a" {
		t.Errorf("calls %q, result %+v", e.calls, res)
	}
}

func TestAttemptFailures(t *testing.T) {
	busy := func() (inference.Revision, error) {
		return inference.Revision{}, &endpointclient.RejectedError{Message: "revision 2 is still rolling out: promote or abort it before changing what replicas run"}
	}
	invalid := func() (inference.Revision, error) {
		return inference.Revision{}, &endpointclient.RejectedError{Message: "invalid", Problems: []schema.Problem{{Path: "image", Message: "must not contain whitespace"}}}
	}
	now := time.Now()
	clock := func() time.Time { now = now.Add(time.Minute); return now }
	cases := []struct {
		name     string
		e        *scripted
		opts     []Option
		errType  string
		contains string
	}{
		{"another rollout in progress", &scripted{statuses: []func() (activities.EndpointStatus, error){found(rollingOut())}, update: busy},
			nil, activities.ErrTypeStepFailed, `endpoint "chat" refused the spec: revision 2 is still rolling out`},
		{"refused spec", &scripted{statuses: []func() (activities.EndpointStatus, error){found(rollingOut())}, update: invalid},
			nil, activities.ErrTypeInvalidStep, "invalid endpoint spec: spec.image: must not contain whitespace"},
		{"deleted while waiting", &scripted{statuses: []func() (activities.EndpointStatus, error){found(rollingOut()), found(rollingOut()), notFound},
			update: func() (inference.Revision, error) { return rev(2, "b"), nil }},
			nil, activities.ErrTypeRolloutFailed, `endpoint "chat" was deleted while revision 2 rolled out`},
		{"timeout", &scripted{statuses: []func() (activities.EndpointStatus, error){found(rollingOut())},
			update: func() (inference.Revision, error) { return rev(2, "b"), nil }},
			[]Option{WithClock(clock)}, activities.ErrTypeStepTimeout, `revision 2 of endpoint "chat" did not finish rolling out within 1h0m0s (revision 2: canary step 1 of 2: 20% of traffic); the rollout goes on`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := run(t, tc.e, request(), nil, tc.opts...)
			ae := appErr(t, err)
			if ae.Type() != tc.errType || !strings.Contains(ae.Message(), tc.contains) {
				t.Errorf("error %s: %q, want %s containing %q", ae.Type(), ae.Message(), tc.errType, tc.contains)
			}
		})
	}
}
