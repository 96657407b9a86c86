package runclient

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/runstate"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/grpc/codes"
)

// ErrRunNotFound means Temporal has no open execution for the run (never
// started, finished and no longer signalable, or past retention).
var ErrRunNotFound = errors.New("run not found in Temporal")

// Search attributes registered on the namespace; typed keys so a type
// mismatch fails at start rather than silently dropping the attribute.
var (
	saProject   = temporal.NewSearchAttributeKeyKeyword(runstate.SAProject)
	saPipeline  = temporal.NewSearchAttributeKeyKeyword(runstate.SAPipeline)
	saState     = temporal.NewSearchAttributeKeyKeyword(runstate.SAState)
	saCreatedBy = temporal.NewSearchAttributeKeyKeyword(runstate.SACreatedBy)
	saSchedule  = temporal.NewSearchAttributeKeyKeyword(runstate.SASchedule)
)

// Config locates the namespace and, optionally, the Temporal web UI.
type Config struct {
	// Namespace the client is connected to; used only to build UI links.
	Namespace string
	// UIBase is the UI's base URL (e.g. http://localhost:8233); empty
	// disables UI links.
	UIBase string
}

// Client starts, signals, queries and describes runs on Temporal.
type Client struct {
	c   client.Client
	cfg Config
}

// New wraps a connected client. The caller owns (and closes) the client.
func New(c client.Client, cfg Config) *Client {
	if cfg.Namespace == "" {
		cfg.Namespace = client.DefaultNamespace
	}
	cfg.UIBase = strings.TrimRight(cfg.UIBase, "/")
	return &Client{c: c, cfg: cfg}
}

// StartRequest describes one run to start.
type StartRequest struct {
	RunID     string // becomes the workflow ID
	Workflow  string // registered workflow type name
	TaskQueue string
	// Input is the single workflow argument; nil starts the workflow with
	// none. A json.RawMessage passes through the JSON payload converter as is.
	Input    any
	Project  string
	Pipeline string // empty for native Go workflows
	// CreatedBy names the API token that started the run (AtelierCreatedBy).
	CreatedBy string
	// Schedule names the Atelier schedule that starts the run
	// (AtelierSchedule; set by CreateSchedule).
	Schedule string
	// Reuse, on a retry of a native Go pipeline run, is what the new run
	// takes from the retried one. It travels in the start's memo
	// (runstate.MemoReuse): the Go pipeline's input is its author's type
	// and has no room for it.
	Reuse *runstate.Reuse
}

// StartRun starts the run's workflow. Starting a run that was already
// started (running or closed) succeeds without effect, which lets the
// gateway complete a start that a crash interrupted.
func (e *Client) StartRun(ctx context.Context, r StartRequest) error {
	if r.RunID == "" || r.Workflow == "" || r.TaskQueue == "" {
		return fmt.Errorf("runclient: run ID, workflow and task queue are required")
	}
	opts := e.startOptions(r)
	var args []any
	if r.Input != nil {
		args = append(args, r.Input)
	}
	_, err := e.c.ExecuteWorkflow(ctx, opts, r.Workflow, args...)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return nil
	}
	if err != nil {
		if !definitelyNotStarted(err) {
			return fmt.Errorf("runclient: start run %s: %w: %w", r.RunID, ErrStartUncertain, err)
		}
		return fmt.Errorf("runclient: start run %s: %w", r.RunID, err)
	}
	return nil
}

// startOptions are a run's start options: its search attributes and memo
// (which REST and the reconciler read), and the ID policies that make a
// start idempotent. Scheduled runs take their attributes and memo from
// here too.
func (e *Client) startOptions(r StartRequest) client.StartWorkflowOptions {
	attrs := []temporal.SearchAttributeUpdate{
		saProject.ValueSet(r.Project),
		saState.ValueSet(string(runstate.Pending)),
	}
	memo := map[string]any{"project": r.Project, "workflow": r.Workflow}
	if r.Pipeline != "" {
		attrs = append(attrs, saPipeline.ValueSet(r.Pipeline))
		memo["pipeline"] = r.Pipeline
	}
	if r.CreatedBy != "" {
		attrs = append(attrs, saCreatedBy.ValueSet(r.CreatedBy))
	}
	if r.Schedule != "" {
		attrs = append(attrs, saSchedule.ValueSet(r.Schedule))
	}
	if r.Reuse != nil {
		memo[runstate.MemoReuse] = r.Reuse
	}
	opts := client.StartWorkflowOptions{
		ID:        r.RunID,
		TaskQueue: r.TaskQueue,
		// Reject-duplicate plus an error when already started: a second
		// start with the same run ID can never run the workflow twice, even
		// after the first execution closed.
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		TypedSearchAttributes:                    temporal.NewSearchAttributes(attrs...),
		Memo:                                     memo,
	}
	return opts
}

// ErrStartUncertain marks a failed start that may nonetheless have started
// the workflow (a timeout, a dropped connection, an internal error): the
// caller must keep the run and complete the start later with the same run
// ID (which never starts a second execution), not forget it.
var ErrStartUncertain = errors.New("start not confirmed: the workflow may have started")

// definitelyNotStarted reports start failures Temporal returns only for
// requests it rejected outright.
func definitelyNotStarted(err error) bool {
	switch serviceerror.ToStatus(err).Code() {
	case codes.InvalidArgument, codes.NotFound, codes.PermissionDenied, codes.Unauthenticated,
		codes.ResourceExhausted, codes.FailedPrecondition, codes.Unimplemented, codes.OutOfRange:
		return true
	}
	return false
}

// SignalCancel asks a run to cancel; the workflow decides how (it stops its
// steps and records who asked and why).
func (e *Client) SignalCancel(ctx context.Context, runID string, req runstate.CancelRequest) error {
	err := e.c.SignalWorkflow(ctx, runID, "", runstate.SignalCancel, req)
	if isNotFound(err) {
		return ErrRunNotFound
	}
	if err != nil {
		return fmt.Errorf("runclient: signal cancel %s: %w", runID, err)
	}
	return nil
}

// QueryStatus asks the workflow for its live status. It needs a worker to
// answer, so callers bound it with a short deadline and fall back to the
// status mirrored in Postgres. A closed workflow is ErrRunClosed: its
// replayed answer could be stale (see Closure).
func (e *Client) QueryStatus(ctx context.Context, runID string) (runstate.Status, error) {
	var st runstate.Status
	resp, err := e.queryOpen(ctx, runID)
	if isNotFound(err) {
		return st, ErrRunNotFound
	}
	if errors.Is(err, ErrRunClosed) {
		return st, err
	}
	if err != nil {
		return st, fmt.Errorf("runclient: query status %s: %w", runID, err)
	}
	if err := resp.QueryResult.Get(&st); err != nil {
		return st, fmt.Errorf("runclient: decode status %s: %w", runID, err)
	}
	return st, nil
}

// UIURL links to the run in the Temporal web UI, or "" when no UI is set.
func (e *Client) UIURL(runID string) string {
	if e.cfg.UIBase == "" {
		return ""
	}
	return fmt.Sprintf("%s/namespaces/%s/workflows/%s",
		e.cfg.UIBase, url.PathEscape(e.cfg.Namespace), url.PathEscape(runID))
}

// Health checks that the Temporal frontend answers.
func (e *Client) Health(ctx context.Context) error {
	if _, err := e.c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return fmt.Errorf("runclient: temporal health: %w", err)
	}
	return nil
}

func isNotFound(err error) bool {
	var nf *serviceerror.NotFound
	return errors.As(err, &nf)
}

// QueryAdmissionQueue asks a cluster's GPU admission workflow for its
// queue. A cluster with no admission workflow yet (no GPU step was ever
// submitted to it) has an empty queue.
func (e *Client) QueryAdmissionQueue(ctx context.Context, cluster string) (activities.AdmissionQueue, error) {
	q := activities.AdmissionQueue{Cluster: cluster, Pending: []activities.QueueEntry{}, Running: []activities.QueueEntry{}}
	resp, err := e.c.QueryWorkflow(ctx, activities.AdmissionWorkflowID(cluster), "", activities.QueryAdmissionQueue)
	if isNotFound(err) {
		return q, nil
	}
	if err != nil {
		return q, fmt.Errorf("runclient: query the admission queue of %s: %w", cluster, err)
	}
	if err := resp.Get(&q); err != nil {
		return q, fmt.Errorf("runclient: decode the admission queue of %s: %w", cluster, err)
	}
	return q, nil
}
