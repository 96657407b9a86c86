package api

import (
	"context"
	"errors"
	"strconv"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// ItemStore reads the items of wide forEach steps (step_items).
type ItemStore interface {
	ListStepItems(ctx context.Context, runID, step string, state runstate.StepState, pageToken string, limit int) (catalog.ItemPage, error)
	CountStepItems(ctx context.Context, runID, step string) (map[runstate.StepState]int, error)
	GetStepItem(ctx context.Context, runID, step string, idx int) (runstate.ItemRecord, error)
}

// wideItemOver reports whether a wide step's item is recorded (over).
func (s *server) wideItemOver(ctx context.Context, key activities.LogKey) bool {
	_, err := s.cat.GetStepItem(ctx, key.RunID, key.Step, key.Item)
	return err == nil
}

// wideLogAttempt picks the attempt of a wide step's item whose log is
// asked for (as pickAttempt does from the status for other steps) and
// whether it is over: an item is recorded once it has ended.
func (s *server) wideLogAttempt(ctx context.Context, st runstate.Status, entry runstate.StepStatus, item int, want *int) (int, bool, error) {
	if item >= entry.Wide.Items {
		return 0, false, notFound("step %q of run %s has no item %d", entry.Name, st.RunID, item)
	}
	rec, err := s.cat.GetStepItem(ctx, st.RunID, entry.Name, item)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		if entry.State.Terminal() || st.State.Terminal() {
			return 0, false, notFound("item %d of step %q of run %s never ran", item, entry.Name, st.RunID)
		}
		return derefOr(want, 1), false, nil // pending or running
	case err != nil:
		return 0, false, internalError(err)
	}
	newest := 0
	for _, a := range rec.Attempts {
		newest = max(newest, a.Number)
	}
	if want == nil {
		return max(newest, 1), true, nil
	}
	if *want > newest {
		return 0, false, notFound("item %d of step %q of run %s has no attempt %d", item, entry.Name, st.RunID, *want)
	}
	return *want, true, nil
}

const defaultItemsPage = 100

// ListStepItems pages a forEach step's items: a wide step's from Postgres,
// a small one's from the run status, in index order, optionally of one
// state.
func (s *server) ListStepItems(ctx context.Context, req gen.ListStepItemsRequestObject) (gen.ListStepItemsResponseObject, error) {
	run, err := s.getRun(ctx, req.Project, req.Run)
	if err != nil {
		return nil, err
	}
	st := s.liveStatus(ctx, run)
	entry, found, _ := findStep(st.Steps, req.Step, -1)
	if !found {
		return nil, notFound("run %s has no step %q", run.ID, req.Step)
	}
	var state runstate.StepState
	if req.Params.State != nil {
		state = runstate.StepState(*req.Params.State)
	}
	size := derefOr(req.Params.PageSize, defaultItemsPage)
	runPath := s.runPath(run)
	if entry.Wide == nil {
		return s.statusItems(runPath, entry, state, deref(req.Params.PageToken), size)
	}
	page, err := s.cat.ListStepItems(ctx, run.ID, req.Step, state, deref(req.Params.PageToken), size)
	if errors.Is(err, catalog.ErrInvalidArgument) {
		return nil, newProblem(ptInvalid, "pageToken: not a token of this listing (it must come from the previous page, with the same state filter)")
	}
	if err != nil {
		return nil, internalError(err)
	}
	counts, err := s.cat.CountStepItems(ctx, run.ID, req.Step)
	if err != nil {
		return nil, internalError(err)
	}
	out := gen.ListStepItems200JSONResponse{Items: []gen.StepItem{}, Total: ptr(entry.Wide.Items), NextPageToken: opt(page.NextPageToken)}
	c := liveCounts(entry.Wide, counts)
	cv := itemCountsView(c)
	out.Counts = &cv
	for _, r := range page.Items {
		out.Items = append(out.Items, itemView(runPath, req.Step, r))
	}
	return out, nil
}

// statusItems pages a small forEach step's items out of its status (the
// token is the index to start at).
func (s *server) statusItems(runPath string, entry runstate.StepStatus, state runstate.StepState, token string, size int) (gen.ListStepItemsResponseObject, error) {
	if entry.Items == nil && !entry.State.Terminal() && entry.State != runstate.StepRunning {
		return gen.ListStepItems200JSONResponse{Items: []gen.StepItem{}}, nil
	}
	start := 0
	if token != "" {
		v, err := strconv.Atoi(token)
		if err != nil || v < 0 {
			return nil, newProblem(ptInvalid, "pageToken: not a token of this listing")
		}
		start = v
	}
	out := gen.ListStepItems200JSONResponse{Items: []gen.StepItem{}, Total: ptr(len(entry.Items))}
	for k := start; k < len(entry.Items); k++ {
		it := entry.Items[k]
		if state != "" && it.State != state {
			continue
		}
		if len(out.Items) == size {
			out.NextPageToken = ptr(strconv.Itoa(k))
			break
		}
		rec := runstate.ItemRecord{Index: k, State: it.State, Item: it.Item, Attempts: it.Attempts, Error: it.Error, Message: it.Message, Outputs: it.Outputs}
		v := itemView(runPath, entry.Name, rec)
		v.StartedAt, v.FinishedAt = it.StartedAt, it.FinishedAt
		out.Items = append(out.Items, v)
	}
	return out, nil
}

// liveCounts are a wide step's counts: the workflow's (batches that ended)
// or Postgres' (every recorded item), whichever has seen more.
func liveCounts(w *runstate.WideStatus, stored map[runstate.StepState]int) runstate.ItemCounts {
	c := runstate.ItemCounts{
		Succeeded: stored[runstate.StepSucceeded], Failed: stored[runstate.StepFailed],
		Cancelled: stored[runstate.StepCancelled], Cached: stored[runstate.StepCached], Skipped: stored[runstate.StepSkipped],
	}
	if w.Counts.Succeeded+w.Counts.Failed+w.Counts.Cancelled+w.Counts.Cached+w.Counts.Skipped >= c.Succeeded+c.Failed+c.Cancelled+c.Cached+c.Skipped {
		return w.Counts
	}
	return c
}

// withLiveCounts refreshes the counts of wide steps still running from
// Postgres (the workflow counts a batch's items only when it ends). One
// indexed count per running wide step; errors leave the workflow's.
func (s *server) withLiveCounts(ctx context.Context, runID string, st *runstate.Status) {
	for i := range st.Steps {
		w := st.Steps[i].Wide
		if w == nil || st.Steps[i].State.Terminal() {
			continue
		}
		stored, err := s.cat.CountStepItems(ctx, runID, st.Steps[i].Name)
		if err != nil {
			continue
		}
		c := *w
		c.Counts = liveCounts(w, stored)
		st.Steps[i].Wide = &c
	}
}

func itemView(runPath, step string, r runstate.ItemRecord) gen.StepItem {
	v := gen.StepItem{
		Index: r.Index, State: gen.StepState(r.State), Item: r.Item, Outputs: r.Outputs,
		Error: opt(r.Error), Message: opt(r.Message),
	}
	if !r.StartedAt.IsZero() {
		v.StartedAt = ptr(r.StartedAt)
	}
	if !r.FinishedAt.IsZero() {
		v.FinishedAt = ptr(r.FinishedAt)
	}
	attempts := make([]gen.Attempt, len(r.Attempts))
	for j, a := range r.Attempts {
		a.LogURL = logURL(runPath, step, r.Index, a.Number)
		attempts[j] = attemptView(a)
	}
	v.Attempts = &attempts
	return v
}

func itemCountsView(c runstate.ItemCounts) gen.ItemCounts {
	return gen.ItemCounts{Succeeded: c.Succeeded, Failed: c.Failed, Cancelled: c.Cancelled, Cached: c.Cached, NotRun: c.NotRun, Skipped: c.Skipped}
}

func wideView(w *runstate.WideStatus) *gen.WideStatus {
	if w == nil {
		return nil
	}
	out := &gen.WideStatus{
		Items: w.Items, Batches: w.Batches, BatchesDone: w.BatchesDone, Parallelism: w.Parallelism,
		Counts: itemCountsView(w.Counts),
	}
	if len(w.Failures) > 0 {
		f := make([]gen.ItemFailure, len(w.Failures))
		for i, x := range w.Failures {
			f[i] = gen.ItemFailure{Index: x.Index, Item: x.Item, Error: x.Error}
		}
		out.Failures = &f
	}
	if w.Outputs != nil {
		out.OutputsRef = &gen.WideRef{Items: w.Outputs.Items, Run: w.Outputs.Run, Step: w.Outputs.Step}
	}
	return out
}
