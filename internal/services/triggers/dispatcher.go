package triggers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/outbox"
	"github.com/atelier-ml/atelier/internal/services/webhooks"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

// Store is the part of the catalogue the dispatcher needs.
type Store interface {
	ClaimTriggerFirings(ctx context.Context, owner string, now, leaseUntil time.Time, max int) ([]catalog.ClaimedFiring, error)
	RecordTriggerFiring(ctx context.Context, r catalog.FiringResult) error
	DeleteFinishedTriggerFirings(ctx context.Context, before time.Time, max int) (int64, error)
	GetPipeline(ctx context.Context, project, name string) (catalog.Pipeline, error)
	GetPipelineVersion(ctx context.Context, project, name string, version int) (catalog.PipelineVersion, error)
	CreateRun(ctx context.Context, r catalog.Run) (catalog.Run, bool, error)
}

// Engine starts workflows; starting a run already started is a no-op.
type Engine interface {
	StartRun(ctx context.Context, req runclient.StartRequest) error
}

// Options tune the dispatcher; zero values take the defaults.
type Options struct {
	// Poll is how often due firings are read (default 500 ms).
	Poll time.Duration
	// Batch is the most firings claimed at once (default 32).
	Batch int
	// Backoff is the wait before the second attempt when the engine or
	// the catalogue failed; it doubles up to MaxBackoff (defaults 5 s and
	// 10 min); MaxAttempts gives up (default 20).
	Backoff, MaxBackoff time.Duration
	MaxAttempts         int
	// TaskQueue is where pipeline runs start (the gateway's).
	TaskQueue string
	// KeepFor is how long the log keeps finished firings (default 30 days).
	KeepFor time.Duration
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Poll, 500*time.Millisecond)
	def(&o.Backoff, 5*time.Second)
	def(&o.MaxBackoff, 10*time.Minute)
	def(&o.KeepFor, 30*24*time.Hour)
	if o.Batch <= 0 {
		o.Batch = 32
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 20
	}
	if o.TaskQueue == "" {
		o.TaskQueue = runstate.TaskQueueLocal
	}
}

// Dispatcher starts the runs of due firings (see the package doc).
type Dispatcher struct {
	store Store
	eng   Engine
	now   func() time.Time
	log   *zap.Logger
	opt   Options
	owner string
	prune time.Time
}

// New returns a Dispatcher; now is its clock.
func New(s Store, eng Engine, now func() time.Time, log *zap.Logger, opt Options) *Dispatcher {
	opt.defaults()
	var id [6]byte
	_, _ = rand.Read(id[:])
	return &Dispatcher{store: s, eng: eng, now: now, log: log, opt: opt, owner: "gw-" + hex.EncodeToString(id[:])}
}

// Run starts runs until ctx is done.
func (d *Dispatcher) Run(ctx context.Context) {
	outbox.Poll(ctx, d.opt.Poll, d.opt.Batch, d.Tick, func(err error) {
		d.log.Warn("triggers: cannot read the firings; retrying", zap.Error(err))
	})
}

// Tick claims the firings due now and starts their runs, one after the
// other (a start is two quick writes); it returns how many it claimed.
// Once an hour it prunes the log.
func (d *Dispatcher) Tick(ctx context.Context) (int, error) {
	now := d.now()
	if now.Sub(d.prune) > time.Hour {
		d.prune = now
		if n, err := d.store.DeleteFinishedTriggerFirings(ctx, now.Add(-d.opt.KeepFor), 1000); err != nil {
			d.log.Warn("triggers: pruning the firing log failed", zap.Error(err))
		} else if n > 0 {
			d.log.Info("triggers: pruned finished firings", zap.Int64("firings", n))
		}
	}
	claimed, err := d.store.ClaimTriggerFirings(ctx, d.owner, now, now.Add(time.Minute), d.opt.Batch)
	if err != nil {
		return 0, err
	}
	for _, c := range claimed {
		d.fire(ctx, c)
	}
	return len(claimed), nil
}

// permanent is a firing that no attempt can start: it fails at once.
type permanent struct{ error }

// fire makes one attempt of c and records it.
func (d *Dispatcher) fire(ctx context.Context, c catalog.ClaimedFiring) {
	runID, params, err := d.start(ctx, c)
	res := catalog.FiringResult{ID: c.ID, Owner: d.owner, Attempt: c.Attempt, RunID: runID, Params: params, NextAttemptAt: d.now()}
	var perm permanent
	switch {
	case err == nil:
		res.State = catalog.FiringStarted
	case errors.As(err, &perm):
		res.State, res.Error = catalog.FiringFailed, err.Error()
	case c.Attempt >= d.opt.MaxAttempts:
		res.State, res.Error = catalog.FiringFailed, fmt.Sprintf("%v (gave up after %d attempts)", err, c.Attempt)
	default:
		res.State, res.Error = catalog.FiringPending, err.Error()
		res.NextAttemptAt = d.now().Add(webhooks.Backoff(d.opt.Backoff, d.opt.MaxBackoff, c.Attempt))
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := d.store.RecordTriggerFiring(rctx, res); rerr != nil {
		d.log.Warn("triggers: cannot record a firing; it is tried again when its lease expires (the same run)",
			zap.String("firing", c.ID), zap.Error(rerr))
	}
	if err != nil {
		d.log.Info("triggers: firing not started", zap.String("project", c.Project), zap.String("trigger", c.Trigger),
			zap.String("firing", c.ID), zap.Int("attempt", c.Attempt), zap.String("state", res.State), zap.String("error", err.Error()))
	}
}

// start starts c's run, or finds the one an earlier attempt started: the
// run's row is keyed by the firing's ID (its idempotency key). It returns
// the run and the params it was started with.
func (d *Dispatcher) start(ctx context.Context, c catalog.ClaimedFiring) (string, map[string]any, error) {
	var payload any
	if err := json.Unmarshal(c.Payload, &payload); err != nil {
		return "", nil, permanent{fmt.Errorf("the firing's payload: %w", err)}
	}
	root := "upstream"
	if c.Kind == catalog.TriggerHook {
		root = "body"
	}
	params, err := RenderParams(c.Params, root, payload)
	if err != nil {
		return "", nil, permanent{fmt.Errorf("rendering params: %w", err)}
	}
	version := c.Version
	if version == 0 {
		p, err := d.store.GetPipeline(ctx, c.Project, c.Pipeline)
		if errors.Is(err, catalog.ErrNotFound) || (err == nil && p.LatestVersion <= 0) {
			return "", nil, permanent{fmt.Errorf("pipeline %q not found", c.Pipeline)}
		}
		if err != nil {
			return "", nil, err
		}
		version = p.LatestVersion
	}
	v, err := d.store.GetPipelineVersion(ctx, c.Project, c.Pipeline, version)
	if errors.Is(err, catalog.ErrNotFound) {
		return "", nil, permanent{fmt.Errorf("pipeline %q has no version %d", c.Pipeline, version)}
	}
	if err != nil {
		return "", nil, err
	}
	var spec pipeline.Spec
	if err := json.Unmarshal(v.Spec, &spec); err != nil {
		return "", nil, permanent{fmt.Errorf("pipeline %q version %d: %w", c.Pipeline, version, err)}
	}
	resolved, err := pipeline.ResolveParams(&spec, params)
	if err != nil {
		return "", nil, permanent{fmt.Errorf("params for %s version %d: %w", c.Pipeline, version, err)}
	}
	// A new ID each attempt: the idempotency key makes the first
	// attempt's row (and ID) the one every later attempt finds.
	id := uuid.Must(uuid.NewV7()).String()
	in := workflows.PipelineInput{RunID: id, Project: c.Project, Pipeline: c.Pipeline, Version: version, Spec: spec, Params: resolved}
	input, err := json.Marshal(in)
	if err != nil {
		return "", nil, permanent{err}
	}
	createdBy := "trigger:" + c.Trigger
	now := d.now().UTC()
	run, _, err := d.store.CreateRun(ctx, catalog.Run{
		ID: id, Project: c.Project, Pipeline: c.Pipeline, Version: version, Workflow: runstate.PipelineWorkflowName,
		State: runstate.Pending, Input: input, CreatedAt: now, UpdatedAt: now, CreatedBy: createdBy,
		IdempotencyKey: c.ID, RequestHash: c.ID,
	})
	if err != nil {
		return "", nil, err
	}
	var started struct {
		Params map[string]any `json:"params"`
	}
	_ = json.Unmarshal(run.Input, &started) // the stored run's: an earlier attempt's
	if run.State != runstate.Pending {
		return run.ID, started.Params, nil // an earlier attempt started it
	}
	// The stored row's input: an earlier attempt's, if it wrote the row
	// (a pipeline version pushed since does not change what this firing
	// starts).
	err = d.eng.StartRun(ctx, runclient.StartRequest{
		RunID: run.ID, Workflow: runstate.PipelineWorkflowName, TaskQueue: d.opt.TaskQueue,
		Input: json.RawMessage(run.Input), Project: c.Project, Pipeline: c.Pipeline, CreatedBy: createdBy,
	})
	if err != nil {
		return run.ID, nil, err
	}
	return run.ID, started.Params, nil
}
