package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// Store is the part of the catalogue the reconciler needs.
type Store interface {
	GetRun(ctx context.Context, project, id string) (catalog.Run, error)
	ListUnfinishedRuns(ctx context.Context, before time.Time, after catalog.RunKey, limit int) ([]catalog.Run, error)
	MirrorRun(ctx context.Context, s runstate.Status) error
}

// Temporal is the part of the engine the reconciler needs.
type Temporal interface {
	Closure(ctx context.Context, runID string) (runclient.Closure, error)
	ClosedOutside(ctx context.Context, since time.Time) (map[string]string, error)
}

// Options tune the sweeps; zero values take the defaults.
type Options struct {
	// Interval between visibility sweeps (default 5 s).
	Interval time.Duration
	// StaleAfter: rows unchanged for this long are checked (default 2 min).
	StaleAfter time.Duration
	// NeverStartedAfter: a PENDING row with no workflow is failed after
	// this long (default 5 min); before that its start may be in flight.
	NeverStartedAfter time.Duration
	// Namespace is named in messages.
	Namespace string
}

// Reconciler converges catalogue rows with Temporal.
type Reconciler struct {
	store Store
	tmp   Temporal
	now   func() time.Time
	log   *zap.Logger
	opt   Options
	// stale is where the next stale-row sweep resumes: runs in flight for
	// longer than a sweep's batch would otherwise be the only ones ever
	// checked.
	stale catalog.RunKey
}

// New returns a Reconciler; now is its clock.
func New(store Store, tmp Temporal, now func() time.Time, log *zap.Logger, opt Options) *Reconciler {
	if opt.Interval <= 0 {
		opt.Interval = 5 * time.Second
	}
	if opt.StaleAfter <= 0 {
		opt.StaleAfter = 2 * time.Minute
	}
	if opt.NeverStartedAfter <= 0 {
		opt.NeverStartedAfter = 5 * time.Minute
	}
	return &Reconciler{store: store, tmp: tmp, now: now, log: log, opt: opt}
}

// Converge checks one unfinished run against Temporal and, if its workflow
// has closed (or does not exist), records the final state. It returns the
// status it wrote and true, or false when the run is still in flight.
func (r *Reconciler) Converge(ctx context.Context, run catalog.Run) (runstate.Status, bool, error) {
	if run.State.Terminal() {
		return runstate.Status{}, false, nil
	}
	c, err := r.tmp.Closure(ctx, run.ID)
	switch {
	case errors.Is(err, runclient.ErrRunNotFound):
		if run.State == runstate.Pending && r.now().Sub(run.CreatedAt) < r.opt.NeverStartedAfter {
			return runstate.Status{}, false, nil // its start may be in flight
		}
		c = runclient.Closure{State: runstate.Failed, ClosedAt: r.now(),
			Reason: fmt.Sprintf("the run has no workflow in Temporal (namespace %q): it never started, was deleted, or belongs to another Temporal server", r.opt.Namespace)}
	case err != nil:
		return runstate.Status{}, false, err
	case c.Open:
		return runstate.Status{}, false, nil
	}
	// A workflow closes only after its last mirror write, so a row read
	// before that write landed (a GET racing the run's end) is stale now:
	// read it again rather than end the run from a status without its
	// last steps and result.
	if fresh, err := r.store.GetRun(ctx, run.Project, run.ID); err == nil && fresh.State.Terminal() && fresh.Status != nil {
		return *fresh.Status, true, nil
	} else if err == nil {
		run = fresh
	}
	st := baseStatus(run)
	st.EndedOutside(c.State, c.Reason, c.ClosedAt)
	if err := r.store.MirrorRun(ctx, st); err != nil {
		return runstate.Status{}, false, fmt.Errorf("reconcile run %s: %w", run.ID, err)
	}
	r.log.Info("run converged with Temporal", zap.String("run", run.ID), zap.String("project", run.Project),
		zap.String("state", string(st.State)), zap.String("reason", c.Reason))
	return st, true, nil
}

func baseStatus(run catalog.Run) runstate.Status {
	if run.Status != nil {
		st := *run.Status
		st.Steps = append([]runstate.StepStatus(nil), st.Steps...)
		return st
	}
	return runstate.Status{RunID: run.ID, Project: run.Project, Pipeline: run.Pipeline, Version: run.Version,
		Workflow: run.Workflow, State: run.State, StartedAt: &run.CreatedAt}
}

// Run sweeps until ctx is done.
func (r *Reconciler) Run(ctx context.Context) {
	since := r.now().Add(-24 * time.Hour)
	tick := time.NewTicker(r.opt.Interval)
	defer tick.Stop()
	var lastStale time.Time
	for {
		// Overlap the windows: visibility is eventually consistent.
		next := r.now().Add(-time.Minute)
		if err := r.sweepClosed(ctx, since); err == nil {
			since = next
		} else if ctx.Err() == nil {
			r.log.Warn("reconcile: visibility sweep failed", zap.Error(err))
		}
		if r.now().Sub(lastStale) >= r.opt.StaleAfter/2 {
			if err := r.sweepStale(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("reconcile: stale-row sweep failed", zap.Error(err))
			}
			lastStale = r.now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *Reconciler) sweepClosed(ctx context.Context, since time.Time) error {
	ids, err := r.tmp.ClosedOutside(ctx, since)
	if err != nil {
		return err
	}
	for id, project := range ids {
		run, err := r.store.GetRun(ctx, project, id)
		if errors.Is(err, catalog.ErrNotFound) {
			continue // not an Atelier run, or another catalogue's
		}
		if err != nil {
			return err
		}
		if _, _, err := r.Converge(ctx, run); err != nil {
			r.log.Warn("reconcile: run not converged", zap.String("run", id), zap.Error(err))
		}
	}
	return nil
}

// staleBatch bounds Temporal calls per stale sweep.
const staleBatch = 200

func (r *Reconciler) sweepStale(ctx context.Context) error {
	runs, err := r.store.ListUnfinishedRuns(ctx, r.now().Add(-r.opt.StaleAfter), r.stale, staleBatch)
	if err != nil {
		return err
	}
	if len(runs) < staleBatch {
		r.stale = catalog.RunKey{} // the end: the next sweep starts over
	} else {
		last := runs[len(runs)-1]
		r.stale = catalog.RunKey{UpdatedAt: last.UpdatedAt, ID: last.ID}
	}
	for _, run := range runs {
		if _, _, err := r.Converge(ctx, run); err != nil {
			r.log.Warn("reconcile: run not converged", zap.String("run", run.ID), zap.Error(err))
		}
	}
	return nil
}
