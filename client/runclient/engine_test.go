package runclient

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"

	querypb "go.temporal.io/api/query/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// fakeClient implements only what Engine calls; any other method panics via
// the nil embedded interface, which is what a test wants.
type fakeClient struct {
	client.Client
	startErr  error
	signalErr error
	queryErr  error
	closed    bool // the workflow has closed (a replayed query would still answer)
	status    runstate.Status

	opts     client.StartWorkflowOptions
	workflow any
	args     []any
	signal   any
}

func (f *fakeClient) ExecuteWorkflow(_ context.Context, o client.StartWorkflowOptions, wf any, args ...any) (client.WorkflowRun, error) {
	f.opts, f.workflow, f.args = o, wf, args
	return nil, f.startErr
}

func (f *fakeClient) SignalWorkflow(_ context.Context, _, _, _ string, arg any) error {
	f.signal = arg
	return f.signalErr
}

func (f *fakeClient) QueryWorkflowWithOptions(_ context.Context, req *client.QueryWorkflowWithOptionsRequest) (*client.QueryWorkflowWithOptionsResponse, error) {
	if f.queryErr != nil {
		return nil, f.queryErr
	}
	if f.closed {
		if req.QueryRejectCondition == enumspb.QUERY_REJECT_CONDITION_NOT_OPEN {
			return &client.QueryWorkflowWithOptionsResponse{QueryRejected: &querypb.QueryRejected{Status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED}}, nil
		}
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(f.status)
	if err != nil {
		return nil, err
	}
	return &client.QueryWorkflowWithOptionsResponse{QueryResult: client.NewValue(p)}, nil
}

func TestStartRun(t *testing.T) {
	f := &fakeClient{}
	e := New(f, Config{})
	in := json.RawMessage(`{"x":1}`)
	err := e.StartRun(context.Background(), StartRequest{
		RunID: "r1", Workflow: runstate.PipelineWorkflowName, TaskQueue: runstate.TaskQueueLocal,
		Input: in, Project: "p", Pipeline: "train",
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.opts.ID != "r1" || f.opts.TaskQueue != runstate.TaskQueueLocal || f.workflow != runstate.PipelineWorkflowName {
		t.Fatalf("options %+v workflow %v", f.opts, f.workflow)
	}
	if f.opts.WorkflowIDReusePolicy != enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE || !f.opts.WorkflowExecutionErrorWhenAlreadyStarted {
		t.Fatal("start is not duplicate-safe")
	}
	if f.opts.TypedSearchAttributes.Size() != 3 {
		t.Fatalf("search attributes: %d", f.opts.TypedSearchAttributes.Size())
	}
	if st, _ := f.opts.TypedSearchAttributes.GetKeyword(saState); st != "PENDING" {
		t.Fatalf("state attribute %q", st)
	}
	if len(f.args) != 1 || string(f.args[0].(json.RawMessage)) != `{"x":1}` {
		t.Fatalf("args %v", f.args)
	}

	// A Go workflow without input starts with no argument and no pipeline attribute.
	if err := e.StartRun(context.Background(), StartRequest{RunID: "r2", Workflow: "wf", TaskQueue: "q", Project: "p"}); err != nil {
		t.Fatal(err)
	}
	if len(f.args) != 0 || f.opts.TypedSearchAttributes.Size() != 2 {
		t.Fatalf("args %v attrs %d", f.args, f.opts.TypedSearchAttributes.Size())
	}

	// Who started it, and the schedule that did, when known.
	if err := e.StartRun(context.Background(), StartRequest{RunID: "r3", Workflow: "wf", TaskQueue: "q", Project: "p", CreatedBy: "alice", Schedule: "nightly"}); err != nil {
		t.Fatal(err)
	}
	by, _ := f.opts.TypedSearchAttributes.GetKeyword(saCreatedBy)
	sched, _ := f.opts.TypedSearchAttributes.GetKeyword(saSchedule)
	if by != "alice" || sched != "nightly" {
		t.Fatalf("created by %q, schedule %q", by, sched)
	}
	if _, ok := f.opts.Memo[runstate.MemoReuse]; ok {
		t.Fatal("a run that is no retry carries a reuse plan")
	}

	// A Go pipeline's retry carries its plan in the memo, beside the rest.
	reuse := &runstate.Reuse{RetryOf: "r2", Steps: []runstate.ReusedStep{{Name: "prep", Done: true}}}
	if err := e.StartRun(context.Background(), StartRequest{RunID: "r4", Workflow: "wf", TaskQueue: "q", Project: "p", Reuse: reuse}); err != nil {
		t.Fatal(err)
	}
	if f.opts.Memo[runstate.MemoReuse] != reuse || f.opts.Memo["workflow"] != "wf" {
		t.Fatalf("memo %v", f.opts.Memo)
	}
}

func TestStartRunAlreadyStartedIsSuccess(t *testing.T) {
	f := &fakeClient{startErr: serviceerror.NewWorkflowExecutionAlreadyStarted("exists", "", "")}
	if err := New(f, Config{}).StartRun(context.Background(), StartRequest{RunID: "r", Workflow: "w", TaskQueue: "q"}); err != nil {
		t.Fatalf("want nil, got %v", err)
	}
	f.startErr = serviceerror.NewUnavailable("down")
	if err := New(f, Config{}).StartRun(context.Background(), StartRequest{RunID: "r", Workflow: "w", TaskQueue: "q"}); err == nil {
		t.Fatal("want error")
	}
}

func TestSignalAndQueryNotFound(t *testing.T) {
	f := &fakeClient{signalErr: serviceerror.NewNotFound("gone"), queryErr: serviceerror.NewNotFound("gone")}
	e := New(f, Config{})
	if err := e.SignalCancel(context.Background(), "r", runstate.CancelRequest{Reason: "x"}); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("signal: %v", err)
	}
	if _, err := e.QueryStatus(context.Background(), "r"); !errors.Is(err, ErrRunNotFound) {
		t.Fatalf("query: %v", err)
	}
}

func TestQueryStatus(t *testing.T) {
	f := &fakeClient{status: runstate.Status{RunID: "r", State: runstate.Running, Seq: 7}}
	st, err := New(f, Config{}).QueryStatus(context.Background(), "r")
	if err != nil || st.Seq != 7 || st.State != runstate.Running {
		t.Fatalf("%+v %v", st, err)
	}
}

func TestUIURL(t *testing.T) {
	if got := New(nil, Config{}).UIURL("r"); got != "" {
		t.Fatalf("no UI: %q", got)
	}
	got := New(nil, Config{Namespace: "ml", UIBase: "http://ui:8233/"}).UIURL("0190-ab")
	if got != "http://ui:8233/namespaces/ml/workflows/0190-ab" {
		t.Fatal(got)
	}
}

func TestQueryOfAClosedWorkflowIsRefused(t *testing.T) {
	e := New(&fakeClient{closed: true, status: runstate.Status{State: runstate.Running}}, Config{})
	if _, err := e.QueryStatus(context.Background(), "r1"); !errors.Is(err, ErrRunClosed) {
		t.Fatalf("QueryStatus of a closed workflow = %v, want ErrRunClosed (its replayed answer says RUNNING)", err)
	}
}

func TestStartFailuresAreDefiniteOrUncertain(t *testing.T) {
	for _, tc := range []struct {
		err       error
		uncertain bool
	}{
		{serviceerror.NewInvalidArgument("bad search attribute"), false},
		{serviceerror.NewNamespaceNotFound("atelier"), false},
		{serviceerror.NewResourceExhausted(0, "rate limited"), false},
		{serviceerror.NewDeadlineExceeded("timeout"), true},
		{serviceerror.NewUnavailable("connection reset"), true},
		{context.DeadlineExceeded, true},
		{errors.New("something else"), true},
	} {
		e := New(&fakeClient{startErr: tc.err}, Config{})
		err := e.StartRun(context.Background(), StartRequest{RunID: "r", Workflow: "w", TaskQueue: "q"})
		if got := errors.Is(err, ErrStartUncertain); got != tc.uncertain {
			t.Errorf("%v: uncertain = %v, want %v", tc.err, got, tc.uncertain)
		}
	}
}
