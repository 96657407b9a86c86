package foreach

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/workflows"
	"github.com/atelier-ml/atelier/workflows/spec"
)

// MaxOutputsBytes bounds the JSON of the outputs one render loads per
// wide step it reads: the render holds them in memory, decoded, on a
// worker shared with other runs (100,000 items of about 640 bytes each).
const MaxOutputsBytes = 64 << 20

// ItemStore is what the activities need of the catalogue
// (*store.Store implements it).
type ItemStore interface {
	RecordItems(ctx context.Context, runID, step string, items []workflows.ItemRecord) error
	ReuseStepItems(ctx context.Context, newRun, oldRun, step string, start int, items []any) ([]int, error)
	StepOutputs(ctx context.Context, runID, step string, n, maxBytes int) ([]any, error)
}

// Activities are the wide forEach activities.
type Activities struct {
	store ItemStore
}

// New returns the activities over store.
func New(store ItemStore) *Activities { return &Activities{store: store} }

// Register registers the activities under their contract names.
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.RecordItems, activity.RegisterOptions{Name: workflows.RecordItemsName})
	reg.RegisterActivityWithOptions(a.ReuseItems, activity.RegisterOptions{Name: workflows.ReuseItemsName})
	reg.RegisterActivityWithOptions(a.RenderStep, activity.RegisterOptions{Name: workflows.RenderStepName})
}

// RecordItems stores a batch of finished items. Store errors are returned
// as they are, so Temporal retries them; writes are idempotent.
func (a *Activities) RecordItems(ctx context.Context, req workflows.RecordItemsRequest) error {
	if err := a.store.RecordItems(ctx, req.RunID, req.Step, req.Items); err != nil {
		if errors.Is(err, catalog.ErrInvalidArgument) {
			return temporal.NewNonRetryableApplicationError(err.Error(), "InvalidItems", nil)
		}
		return fmt.Errorf("record items of %s/%s: %w", req.RunID, req.Step, err)
	}
	return nil
}

// ReuseItems copies the batch's items that succeeded in the retried run.
func (a *Activities) ReuseItems(ctx context.Context, req workflows.ReuseItemsRequest) (workflows.ReuseItemsResult, error) {
	idx, err := a.store.ReuseStepItems(ctx, req.RunID, req.OldRun, req.Step, req.Start, req.Items)
	if err != nil {
		return workflows.ReuseItemsResult{}, fmt.Errorf("reuse items of %s/%s: %w", req.OldRun, req.Step, err)
	}
	return workflows.ReuseItemsResult{Indexes: idx}, nil
}

// RenderStep renders a step over the outputs of the wide steps it reads,
// with the activity's expression budget (spec.ActivityLimits). A template
// that cannot be rendered fails the step without retries; a store error
// is retried.
func (a *Activities) RenderStep(ctx context.Context, req workflows.RenderRequest) (workflows.RenderResult, error) {
	env := spec.Env{Params: req.Params, Run: req.Run, Steps: map[string]spec.StepEnv{}, Limits: spec.ActivityLimits}
	for name, out := range req.Outputs {
		env.Steps[name] = spec.StepEnv{Outputs: out}
	}
	for name, ref := range req.Wide {
		outs, err := a.store.StepOutputs(ctx, ref.Run, ref.Step, ref.Items, MaxOutputsBytes)
		if err != nil {
			if errors.Is(err, catalog.ErrInvalidArgument) {
				return workflows.RenderResult{}, temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("reading the outputs of step %q: %v", name, err), workflows.ErrTypeRender, nil)
			}
			return workflows.RenderResult{}, fmt.Errorf("read the outputs of step %q: %w", name, err)
		}
		env.Steps[name] = spec.StepEnv{Outputs: outs}
	}
	res, err := workflows.RenderStep(&req.Step, env, req.Items)
	if err != nil {
		return workflows.RenderResult{}, temporal.NewNonRetryableApplicationError(err.Error(), workflows.ErrTypeRender, nil)
	}
	return res, nil
}
