package runclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// ErrRunClosed means the run's workflow has closed: its status query was
// refused rather than answered from a replay, because a workflow ended
// outside Atelier (terminate, timeout) would answer with the state it had
// when it was stopped, e.g. RUNNING.
var ErrRunClosed = errors.New("run's workflow is closed")

// Closure is how a run's workflow ended, as Temporal recorded it.
type Closure struct {
	// Open is true while the workflow runs; the other fields are then zero.
	Open bool
	// State is the run state Temporal's close status maps to: SUCCEEDED,
	// FAILED (failed, timed out), CANCELLED or TERMINATED.
	State    runstate.State
	Reason   string // e.g. the terminate reason and identity
	ClosedAt time.Time
}

// Closure describes how the run's workflow ended. ErrRunNotFound when
// Temporal has no such workflow (never started, another Temporal, past
// retention).
func (e *Client) Closure(ctx context.Context, runID string) (Closure, error) {
	d, err := e.c.DescribeWorkflowExecution(ctx, runID, "")
	if isNotFound(err) {
		return Closure{}, ErrRunNotFound
	}
	if err != nil {
		return Closure{}, fmt.Errorf("runclient: describe %s: %w", runID, err)
	}
	info := d.GetWorkflowExecutionInfo()
	c := Closure{}
	if t := info.GetCloseTime(); t != nil {
		c.ClosedAt = t.AsTime()
	}
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return Closure{Open: true}, nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		c.State = runstate.Succeeded
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		c.State, c.Reason = runstate.Cancelled, "cancelled through Temporal"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		c.State, c.Reason = runstate.Failed, "the workflow timed out (Temporal execution or run timeout)"
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		c.State, c.Reason = runstate.Terminated, "terminated through Temporal"
	default:
		c.State, c.Reason = runstate.Failed, "the workflow failed"
	}
	if ev := e.closeEvent(ctx, runID); ev != nil {
		if a := ev.GetWorkflowExecutionTerminatedEventAttributes(); a != nil {
			c.Reason = fmt.Sprintf("terminated through Temporal by %q: %s", a.GetIdentity(), a.GetReason())
		}
		if a := ev.GetWorkflowExecutionFailedEventAttributes(); a != nil && a.GetFailure() != nil {
			c.Reason = a.GetFailure().GetMessage()
		}
	}
	return c, nil
}

// closeEvent is the last event of a closed workflow, or nil.
func (e *Client) closeEvent(ctx context.Context, runID string) *historypb.HistoryEvent {
	it := e.c.GetWorkflowHistory(ctx, runID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	var last *historypb.HistoryEvent
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return last
		}
		last = ev
	}
	return last
}

// ClosedOutside lists runs whose workflow closed since `since` while its
// AtelierState search attribute still says in flight: the workflow never
// reached its own end (terminated, timed out, reset away), so it never
// mirrored a final state. Each comes with its project.
func (e *Client) ClosedOutside(ctx context.Context, since time.Time) (map[string]string, error) {
	q := fmt.Sprintf("ExecutionStatus != 'Running' AND CloseTime > '%s' AND %s IN ('%s', '%s', '%s')",
		since.UTC().Format(time.RFC3339Nano), runstate.SAState,
		runstate.Pending, runstate.Running, runstate.Cancelling)
	out := map[string]string{}
	var token []byte
	for {
		resp, err := e.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: q, NextPageToken: token, PageSize: 500})
		if err != nil {
			return nil, fmt.Errorf("runclient: list workflows closed outside Atelier: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			project := ""
			if p := ex.GetSearchAttributes().GetIndexedFields()[runstate.SAProject]; p != nil {
				_ = json.Unmarshal(p.GetData(), &project)
			}
			out[ex.GetExecution().GetWorkflowId()] = project
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

// queryOpen asks an open workflow for its status; ErrRunClosed when the
// workflow has closed.
func (e *Client) queryOpen(ctx context.Context, runID string) (client.QueryWorkflowWithOptionsResponse, error) {
	resp, err := e.c.QueryWorkflowWithOptions(ctx, &client.QueryWorkflowWithOptionsRequest{
		WorkflowID: runID, QueryType: runstate.QueryStatus,
		QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
	})
	if err != nil {
		return client.QueryWorkflowWithOptionsResponse{}, err
	}
	if resp.QueryRejected != nil {
		return client.QueryWorkflowWithOptionsResponse{}, ErrRunClosed
	}
	return *resp, nil
}

// StartInput is the input the run's workflow was started with, read from
// its first history event: what a retry needs of a run whose catalogue
// row has none (a schedule or the Temporal SDK started it). It is nil for
// a workflow started without input, and ErrRunNotFound when Temporal has
// no such workflow (past retention).
func (e *Client) StartInput(ctx context.Context, runID string) (json.RawMessage, error) {
	it := e.c.GetWorkflowHistory(ctx, runID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return nil, ErrRunNotFound
	}
	ev, err := it.Next()
	if isNotFound(err) {
		return nil, ErrRunNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("runclient: read the history of %s: %w", runID, err)
	}
	a := ev.GetWorkflowExecutionStartedEventAttributes()
	if a == nil {
		return nil, fmt.Errorf("runclient: the history of %s does not begin with its start", runID)
	}
	ps := a.GetInput().GetPayloads()
	if len(ps) == 0 {
		return nil, nil
	}
	var in json.RawMessage
	if err := converter.GetDefaultDataConverter().FromPayload(ps[0], &in); err != nil {
		return nil, fmt.Errorf("runclient: decode the input of %s: %w", runID, err)
	}
	return in, nil
}
