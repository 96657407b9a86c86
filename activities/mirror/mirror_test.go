package mirror

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
)

type fakeStore struct {
	mu   sync.Mutex
	got  []runstate.Status
	fail error
}

func (f *fakeStore) MirrorRun(_ context.Context, s runstate.Status) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	f.got = append(f.got, s)
	return nil
}

func newEnv(t *testing.T, store RunMirror) *testsuite.TestActivityEnvironment {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	New(store, nil).Register(env)
	return env
}

func TestMirrorRunStores(t *testing.T) {
	store := &fakeStore{}
	env := newEnv(t, store)
	st := runstate.Status{RunID: "r1", Project: "p", Workflow: runstate.PipelineWorkflowName,
		State: runstate.Running, Seq: 7, Steps: []runstate.StepStatus{{Name: "a", State: runstate.StepRunning}}}
	if _, err := env.ExecuteActivity(activities.MirrorRunName, st); err != nil {
		t.Fatal(err)
	}
	if len(store.got) != 1 || store.got[0].RunID != "r1" || store.got[0].Seq != 7 || store.got[0].Steps[0].Name != "a" {
		t.Fatalf("stored %+v", store.got)
	}
}

func TestMirrorRunStoreErrorIsRetryable(t *testing.T) {
	env := newEnv(t, &fakeStore{fail: errors.New("connection refused")})
	_, err := env.ExecuteActivity(activities.MirrorRunName, runstate.Status{RunID: "r1", Project: "p", Seq: 1})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("want application error, got %v", err)
	}
	if appErr.NonRetryable() || !strings.Contains(appErr.Error(), "connection refused") {
		t.Fatalf("want retryable error carrying the cause, got %v (nonRetryable=%v)", appErr, appErr.NonRetryable())
	}
}

func TestMirrorRunRejectsStatusWithoutID(t *testing.T) {
	store := &fakeStore{}
	env := newEnv(t, store)
	_, err := env.ExecuteActivity(activities.MirrorRunName, runstate.Status{Project: "p"})
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !appErr.NonRetryable() || appErr.Type() != ErrTypeInvalidRunStatus {
		t.Fatalf("want non-retryable %s, got %v", ErrTypeInvalidRunStatus, err)
	}
	if len(store.got) != 0 {
		t.Fatal("invalid status reached the store")
	}
}
