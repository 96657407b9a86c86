package models

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/atelier-ml/atelier/activities"
)

// MoveAlias moves (or removes) an alias, then signals every open endpoint
// of the project. Its activities run on the workflow's own queue: a local
// worker's, which holds the catalogue and the Temporal client. They retry
// until the catalogue and Temporal answer; a move of something missing
// ends at once with NotFound and tells nobody.
func MoveAlias(ctx workflow.Context, in activities.MoveModelAliasInput) (activities.MoveModelAliasResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumInterval: 10 * time.Second},
	})
	var res activities.MoveModelAliasResult
	if err := workflow.ExecuteActivity(ctx, activities.SetModelAliasName, in).Get(ctx, &res); err != nil {
		return res, err
	}
	if res.NotFound != "" {
		return res, nil
	}
	req := activities.NotifyModelMovedRequest{Project: in.Project, Moved: activities.ModelMoved{Model: in.Model, Alias: in.Alias}}
	err := workflow.ExecuteActivity(ctx, activities.NotifyModelMovedName, req).Get(ctx, &res.Notified)
	return res, err
}
