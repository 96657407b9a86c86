package modelclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/atelier-ml/atelier/activities"
)

// AnswerTimeout bounds the wait for a move's answer: past it the move
// goes on without the caller (ErrNoAnswer).
const AnswerTimeout = 15 * time.Second

// ErrNoAnswer: the move was started but did not answer in time (no
// worker polls the queue, or the catalogue is down); it still applies
// once a worker runs it.
var ErrNoAnswer = errors.New("modelclient: the alias move did not answer in time; it will apply once a worker runs it")

// Client moves aliases.
type Client struct {
	c         client.Client
	taskQueue string
}

// New wraps a connected client; moves run on taskQueue, a local worker's
// (it holds the catalogue).
func New(c client.Client, taskQueue string) *Client { return &Client{c: c, taskQueue: taskQueue} }

// MoveAlias moves (or, with in.Version nil, removes) an alias and tells
// the project's endpoints, waiting at most AnswerTimeout for the result.
func (m *Client) MoveAlias(ctx context.Context, in activities.MoveModelAliasInput) (activities.MoveModelAliasResult, error) {
	var res activities.MoveModelAliasResult
	id := fmt.Sprintf("atelier-model-alias/%s/%s/%s/%s", in.Project, in.Model, in.Alias, uuid.NewString())
	run, err := m.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: m.taskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, activities.MoveModelAliasWorkflowName, in)
	if err != nil {
		return res, fmt.Errorf("modelclient: start the move of %s@%s: %w", in.Model, in.Alias, err)
	}
	wctx, cancel := context.WithTimeout(ctx, AnswerTimeout)
	defer cancel()
	if err := run.Get(wctx, &res); err != nil {
		if wctx.Err() != nil {
			return res, ErrNoAnswer
		}
		return res, fmt.Errorf("modelclient: move %s@%s: %w", in.Model, in.Alias, err)
	}
	return res, nil
}
