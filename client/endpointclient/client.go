package endpointclient

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/schema"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/atelier-ml/atelier/inference"
)

// Errors callers branch on.
var (
	// ErrNotFound: no open workflow owns that endpoint (never created, or
	// deleted).
	ErrNotFound = errors.New("endpoint not found")
	// ErrExists: an endpoint of that name is open in the project.
	ErrExists = errors.New("endpoint already exists")
	// ErrNoAnswer: the endpoint's workflow did not answer a query or an
	// update within AnswerTimeout. Temporal holds both until a worker
	// polls the workflow's task queue, so it usually means none does. An
	// update that got no answer may still apply when a worker returns.
	ErrNoAnswer = errors.New("the endpoint's workflow did not answer: no worker may be serving it")
)

// AnswerTimeout bounds every query and update to an endpoint's workflow
// (see ErrNoAnswer). A busy worker answers in well under a second.
const AnswerTimeout = 15 * time.Second

// RejectedError is an update the endpoint's workflow refused. Problems is
// set when the spec was invalid (every problem, with its path); otherwise
// Message says why (e.g. a rollout is in progress).
type RejectedError struct {
	Message  string
	Problems []schema.Problem
}

func (e *RejectedError) Error() string { return e.Message }

// Client talks to endpoint workflows.
type Client struct {
	c         client.Client
	namespace string
	uiBase    string
}

// New wraps a connected client; uiBase (may be empty) builds Temporal UI
// links.
func New(c client.Client, namespace, uiBase string) *Client {
	return &Client{c: c, namespace: namespace, uiBase: strings.TrimRight(uiBase, "/")}
}

var saProject = temporal.NewSearchAttributeKeyKeyword(runstate.SAProject)

// Create starts the endpoint's workflow on workflowQueue (a local worker's
// queue, where workflows run) with its activities going to activityQueue
// (the cluster's).
func (e *Client) Create(ctx context.Context, project, name, workflowQueue, activityQueue string, spec inference.EndpointSpec) error {
	opts := client.StartWorkflowOptions{
		ID:        activities.EndpointWorkflowID(project, name),
		TaskQueue: workflowQueue,
		// A deleted endpoint's name may be used again once its workflow
		// closed; an open one is never started twice.
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(saProject.ValueSet(project)),
		Memo:                                     map[string]any{"project": project, "endpoint": name},
	}
	_, err := e.c.ExecuteWorkflow(ctx, opts, activities.EndpointWorkflowName, activities.EndpointInput{
		Project: project, Name: name, Spec: spec, TaskQueue: activityQueue,
	})
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return ErrExists
	}
	if err != nil {
		return fmt.Errorf("endpointclient: start endpoint %s/%s: %w", project, name, err)
	}
	return nil
}

// Status queries the endpoint's workflow. A closed workflow (a deleted
// endpoint) is ErrNotFound.
func (e *Client) Status(ctx context.Context, project, name string) (activities.EndpointStatus, error) {
	var st activities.EndpointStatus
	ctx, cancel := context.WithTimeout(ctx, AnswerTimeout)
	defer cancel()
	res, err := e.c.QueryWorkflowWithOptions(ctx, &client.QueryWorkflowWithOptionsRequest{
		WorkflowID: activities.EndpointWorkflowID(project, name), QueryType: activities.QueryEndpointStatus,
		QueryRejectCondition: enumspb.QUERY_REJECT_CONDITION_NOT_OPEN,
	})
	if isNotFound(err) {
		return st, ErrNotFound
	}
	if err != nil {
		return st, fmt.Errorf("endpointclient: query endpoint %s/%s: %w", project, name, noAnswer(ctx, err))
	}
	if res.QueryRejected != nil {
		return st, ErrNotFound
	}
	if err := res.QueryResult.Get(&st); err != nil {
		return st, fmt.Errorf("endpointclient: decode endpoint status: %w", err)
	}
	if st.Project != project || st.Name != name {
		// Never another tenant's endpoint, whatever the workflow ID says.
		return activities.EndpointStatus{}, ErrNotFound
	}
	return st, nil
}

// Update sends a new spec and waits until the workflow has applied it.
func (e *Client) Update(ctx context.Context, project, name string, spec inference.EndpointSpec) error {
	_, err := e.UpdateSpec(ctx, project, name, spec)
	return err
}

// UpdateSpec is Update answering the revision the spec resolved to: a new
// one, or the latest when the spec equals the latest's (nothing changes).
func (e *Client) UpdateSpec(ctx context.Context, project, name string, spec inference.EndpointSpec) (inference.Revision, error) {
	var rev inference.Revision
	err := e.update(ctx, project, name, activities.UpdateEndpointSpec, &rev, spec)
	return rev, err
}

// Rollback makes a revision with revision to's spec.
func (e *Client) Rollback(ctx context.Context, project, name string, to int) error {
	return e.update(ctx, project, name, activities.UpdateEndpointRollback, nil, to)
}

// Command promotes or aborts the rollout in progress.
func (e *Client) Command(ctx context.Context, project, name string, c inference.Command) error {
	return e.update(ctx, project, name, activities.UpdateEndpointCommand, nil, activities.EndpointCommand{Command: c})
}

// Delete asks the workflow to delete the endpoint; it ends once done.
func (e *Client) Delete(ctx context.Context, project, name string) error {
	return e.update(ctx, project, name, activities.UpdateEndpointDelete, nil)
}

// update runs an update to completion, decoding its answer into result
// (nil: ignored).
func (e *Client) update(ctx context.Context, project, name, update string, result any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, AnswerTimeout)
	defer cancel()
	h, err := e.c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: activities.EndpointWorkflowID(project, name), UpdateName: update,
		Args: args, WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, result)
	}
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return nil
	case isNotFound(err):
		return ErrNotFound
	case errors.As(err, &appErr):
		rej := &RejectedError{Message: appErr.Message()}
		if appErr.Type() == activities.ErrTypeInvalidEndpointSpec && appErr.HasDetails() {
			_ = appErr.Details(&rej.Problems)
		}
		return rej
	}
	return fmt.Errorf("endpointclient: update %s of endpoint %s/%s: %w", update, project, name, noAnswer(ctx, err))
}

// noAnswer is ErrNoAnswer (wrapping err) when a deadline passed: ctx's,
// or the shorter one the SDK gives a query's gRPC call (either form).
func noAnswer(ctx context.Context, err error) error {
	var de *serviceerror.DeadlineExceeded
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &de) {
		return fmt.Errorf("%w (%v)", ErrNoAnswer, err)
	}
	return err
}

// Summary is one endpoint in a list.
type Summary struct {
	Name      string
	CreatedAt time.Time
}

// List returns the project's open endpoints, by name, from Temporal
// visibility (eventually consistent: an endpoint created a moment ago may
// be missing for about a second).
func (e *Client) List(ctx context.Context, project string) ([]Summary, error) {
	q := fmt.Sprintf("WorkflowType = %q AND %s = %q AND ExecutionStatus = 'Running'", activities.EndpointWorkflowName, runstate.SAProject, project)
	var out []Summary
	var token []byte
	for {
		res, err := e.c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: e.namespace, Query: q, NextPageToken: token, PageSize: 1000})
		if err != nil {
			return nil, fmt.Errorf("endpointclient: list endpoints of %s: %w", project, err)
		}
		for _, x := range res.Executions {
			var n string
			if p, ok := x.GetMemo().GetFields()["endpoint"]; ok {
				_ = converter.GetDefaultDataConverter().FromPayload(p, &n)
			}
			if n == "" {
				n = strings.TrimPrefix(x.GetExecution().GetWorkflowId(), activities.EndpointWorkflowID(project, ""))
			}
			out = append(out, Summary{Name: n, CreatedAt: x.GetStartTime().AsTime()})
		}
		if token = res.NextPageToken; len(token) == 0 {
			break
		}
	}
	return out, nil
}

// UIURL links the endpoint's workflow in the Temporal UI ("" without a UI).
func (e *Client) UIURL(project, name string) string {
	if e.uiBase == "" {
		return ""
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s", e.uiBase, url.PathEscape(e.namespace), url.PathEscape(activities.EndpointWorkflowID(project, name)))
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// Names returns the names of the project's open endpoints (List's).
func (e *Client) Names(ctx context.Context, project string) ([]string, error) {
	list, err := e.List(ctx, project)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.Name
	}
	return out, nil
}

// ModelMoved tells the endpoint that an alias moved. An endpoint deleted
// meanwhile is not an error.
func (e *Client) ModelMoved(ctx context.Context, project, name string, m activities.ModelMoved) error {
	err := e.c.SignalWorkflow(ctx, activities.EndpointWorkflowID(project, name), "", activities.SignalEndpointModelMoved, m)
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("endpointclient: tell endpoint %s/%s that %s@%s moved: %w", project, name, m.Model, m.Alias, err)
	}
	return nil
}
