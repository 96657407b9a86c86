package foreach

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
)

// MaxOutputsBytes bounds the JSON of the outputs one render loads per
// wide step it reads: the render holds them in memory, decoded, on a
// worker shared with other runs (100,000 items of about 640 bytes each).
const MaxOutputsBytes = 64 << 20

// ItemStore is what the activities need of the catalogue
// (*store.Store implements it).
type ItemStore interface {
	RecordItems(ctx context.Context, project, runID, step string, items []runstate.ItemRecord) error
	ReuseStepItems(ctx context.Context, newRun, oldRun, step string, start int, items []any) ([]int, error)
	StepOutputs(ctx context.Context, runID, step string, n, maxBytes int) ([]any, error)
	FanInStore
}

// Activities are the wide forEach activities.
type Activities struct {
	store   ItemStore
	fanIn   FanInStore
	arts    Objects // nil: no artifact store (FanIn fails saying so)
	outputs outputsCache
}

// New returns the activities over store; arts is the artifact store (nil
// when the installation has none).
func New(store ItemStore, arts Objects) *Activities {
	return &Activities{store: store, fanIn: store, arts: arts}
}

// Register registers the activities under their contract names.
func (a *Activities) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(a.RecordItems, activity.RegisterOptions{Name: activities.RecordItemsName})
	reg.RegisterActivityWithOptions(a.ReuseItems, activity.RegisterOptions{Name: activities.ReuseItemsName})
	reg.RegisterActivityWithOptions(a.RenderStep, activity.RegisterOptions{Name: activities.RenderStepName})
	reg.RegisterActivityWithOptions(a.RenderItems, activity.RegisterOptions{Name: activities.RenderItemsName})
	reg.RegisterActivityWithOptions(a.FanIn, activity.RegisterOptions{Name: activities.FanInName})
}

// RecordItems stores a batch of finished items. Store errors are returned
// as they are, so Temporal retries them; writes are idempotent.
func (a *Activities) RecordItems(ctx context.Context, req activities.RecordItemsRequest) error {
	if err := a.store.RecordItems(ctx, req.Project, req.RunID, req.Step, req.Items); err != nil {
		if errors.Is(err, catalog.ErrInvalidArgument) {
			return temporal.NewNonRetryableApplicationError(err.Error(), "InvalidItems", nil)
		}
		return fmt.Errorf("record items of %s/%s: %w", req.RunID, req.Step, err)
	}
	return nil
}

// ReuseItems copies the batch's items that succeeded in the retried run.
func (a *Activities) ReuseItems(ctx context.Context, req activities.ReuseItemsRequest) (activities.ReuseItemsResult, error) {
	idx, err := a.store.ReuseStepItems(ctx, req.RunID, req.OldRun, req.Step, req.Start, req.Items)
	if err != nil {
		return activities.ReuseItemsResult{}, fmt.Errorf("reuse items of %s/%s: %w", req.OldRun, req.Step, err)
	}
	return activities.ReuseItemsResult{Indexes: idx}, nil
}

// RenderStep renders a step over the outputs of the wide steps it reads,
// with the activity's expression budget (spec.ActivityLimits). A template
// that cannot be rendered fails the step without retries; a store error
// is retried.
func (a *Activities) RenderStep(ctx context.Context, req activities.RenderRequest) (activities.RenderResult, error) {
	env := pipeline.Env{Params: req.Params, Run: req.Run, Steps: map[string]pipeline.StepEnv{}, Limits: pipeline.ActivityLimits}
	for name, out := range req.Outputs {
		env.Steps[name] = pipeline.StepEnv{Outputs: out}
	}
	if err := a.loadWide(ctx, env.Steps, req.Wide); err != nil {
		return activities.RenderResult{}, err
	}
	res, err := Render(&req, env)
	if err != nil {
		return activities.RenderResult{}, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeRender, nil)
	}
	return res, nil
}

// RenderItems renders a chunk of a forEach's items over the outputs of
// the wide steps their templates read (foreach.RenderItems), stopping
// after activities.RenderItemsTime so that a slow chunk still ends well
// within the activity's timeout.
func (a *Activities) RenderItems(ctx context.Context, req activities.RenderItemsRequest) (activities.RenderItemsResult, error) {
	env := pipeline.Env{Params: req.Params, Run: req.Run, Steps: map[string]pipeline.StepEnv{}, Limits: pipeline.ActivityLimits}
	for name, se := range req.Outputs {
		env.Steps[name] = se
	}
	if err := a.loadWide(ctx, env.Steps, req.Wide); err != nil {
		return activities.RenderItemsResult{}, err
	}
	until := time.Now().Add(activities.RenderItemsTime)
	res, err := RenderItems(&req, env, func() bool { return ctx.Err() != nil || time.Now().After(until) })
	if err != nil {
		return activities.RenderItemsResult{}, temporal.NewNonRetryableApplicationError(err.Error(), activities.ErrTypeRender, nil)
	}
	return res, nil
}

// loadWide puts the outputs of the wide steps refs into steps.
func (a *Activities) loadWide(ctx context.Context, steps map[string]pipeline.StepEnv, refs map[string]runstate.WideRef) error {
	for name, ref := range refs {
		outs, err := a.outputs.get(ref, func() ([]any, error) {
			return a.store.StepOutputs(ctx, ref.Run, ref.Step, ref.Items, MaxOutputsBytes)
		})
		if err != nil {
			if errors.Is(err, catalog.ErrInvalidArgument) {
				return temporal.NewNonRetryableApplicationError(
					fmt.Sprintf("reading the outputs of step %q: %v", name, err), activities.ErrTypeRender, nil)
			}
			return fmt.Errorf("read the outputs of step %q: %w", name, err)
		}
		steps[name] = pipeline.StepEnv{Outputs: outs}
	}
	return nil
}

// outputsCache keeps the outputs of the wide steps loaded last. The
// batches of a wide step whose templates read another's each render their
// items in chunks, several at once: without it every chunk would load
// (and decode) up to MaxOutputsBytes again, and concurrent chunks would
// each hold a copy. A WideRef's rows never change once it exists (it is
// made when the step succeeded; a retry copies rows to its own run), so
// entries never go stale; they only take memory, hence the small count
// and the idle time after which they are dropped. Renders only read the
// lists (expressions do not mutate their inputs).
type outputsCache struct {
	mu      sync.Mutex
	entries map[runstate.WideRef]*outputsEntry
}

type outputsEntry struct {
	ready chan struct{} // closed once outs/err are set
	outs  []any
	err   error
	used  time.Time
}

const (
	outputsCacheEntries = 2
	outputsCacheIdle    = 2 * time.Minute
)

// get returns ref's outputs, loading them with load unless they are
// cached or being loaded (then it waits for that load). Failed loads are
// not kept.
func (c *outputsCache) get(ref runstate.WideRef, load func() ([]any, error)) ([]any, error) {
	c.mu.Lock()
	now := time.Now()
	if c.entries == nil {
		c.entries = map[runstate.WideRef]*outputsEntry{}
	}
	for k, e := range c.entries {
		if isDone(e.ready) && now.Sub(e.used) > outputsCacheIdle {
			delete(c.entries, k)
		}
	}
	e, ok := c.entries[ref]
	if ok {
		e.used = now
		c.mu.Unlock()
		<-e.ready
		return e.outs, e.err
	}
	for len(c.entries) >= outputsCacheEntries && c.evictOldest() {
	}
	e = &outputsEntry{ready: make(chan struct{}), used: now}
	c.entries[ref] = e
	c.mu.Unlock()

	e.outs, e.err = load()
	close(e.ready)
	if e.err != nil {
		c.mu.Lock()
		if c.entries[ref] == e {
			delete(c.entries, ref)
		}
		c.mu.Unlock()
	}
	return e.outs, e.err
}

// evictOldest drops the least recently used loaded entry (c.mu held);
// false when every entry is still loading.
func (c *outputsCache) evictOldest() bool {
	var old runstate.WideRef
	var oldest *outputsEntry
	for k, e := range c.entries {
		if isDone(e.ready) && (oldest == nil || e.used.Before(oldest.used)) {
			old, oldest = k, e
		}
	}
	if oldest == nil {
		return false
	}
	delete(c.entries, old)
	return true
}

func isDone(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
