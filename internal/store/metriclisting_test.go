package store_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// Runs listed by a step's metric: only the pipeline's runs whose step
// reported it (a run without metrics, another step's, another
// pipeline's, a status without steps are left out), highest first or
// lowest, ties newest first, bounded, paged without a gap or a repeat, by
// state too; page tokens are bound to the listing.
func TestListRunsByMetric(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p")
	at := time.Now().Add(-time.Hour)
	mirror := func(id, pipeline string, state runstate.State, steps ...runstate.StepStatus) {
		t.Helper()
		at = at.Add(time.Second)
		created := at
		st := runstate.Status{RunID: id, Project: "p", Pipeline: pipeline, Workflow: runstate.PipelineWorkflowName,
			State: state, Seq: 1, StartedAt: &created, Steps: steps}
		if err := s.MirrorRun(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	train := func(acc float64) runstate.StepStatus {
		return runstate.StepStatus{Name: "train", State: runstate.StepSucceeded, Metrics: &runstate.Metrics{Scalars: map[string]float64{"accuracy": acc}}}
	}
	mirror("a", "train", runstate.Succeeded, train(0.8))
	mirror("b", "train", runstate.Succeeded, train(0.9))
	mirror("c", "train", runstate.Failed, train(0.7))
	mirror("d", "train", runstate.Succeeded, train(0.9)) // ties b, newer
	mirror("e", "train", runstate.Succeeded, runstate.StepStatus{Name: "train", State: runstate.StepSucceeded})
	mirror("f", "train", runstate.Succeeded, runstate.StepStatus{Name: "eval", Metrics: &runstate.Metrics{Scalars: map[string]float64{"accuracy": 1}}})
	mirror("g", "other", runstate.Succeeded, train(0.99))
	mirror("h", "train", runstate.Running) // steps null

	list := func(f catalog.RunFilter) ([]string, []float64) {
		t.Helper()
		var ids []string
		var vals []float64
		for {
			page, err := s.ListRuns(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Runs {
				ids = append(ids, r.ID)
				vals = append(vals, *r.MetricValue)
			}
			if page.NextPageToken == "" {
				return ids, vals
			}
			f.PageToken = page.NextPageToken
		}
	}
	by := func(m catalog.MetricOrder) catalog.RunFilter {
		return catalog.RunFilter{Project: "p", Pipeline: "train", Limit: 2, ByMetric: &m}
	}
	ids, vals := list(by(catalog.MetricOrder{Step: "train", Name: "accuracy"}))
	if !slices.Equal(ids, []string{"d", "b", "a", "c"}) || !slices.Equal(vals, []float64{0.9, 0.9, 0.8, 0.7}) {
		t.Fatalf("highest first: %v %v", ids, vals)
	}
	ids, _ = list(by(catalog.MetricOrder{Step: "train", Name: "accuracy", Ascending: true}))
	if !slices.Equal(ids, []string{"c", "a", "d", "b"}) {
		t.Fatalf("lowest first (ties still newest first): %v", ids)
	}
	lo, hi := 0.75, 0.85
	if ids, _ = list(by(catalog.MetricOrder{Step: "train", Name: "accuracy", Min: &lo, Max: &hi})); !slices.Equal(ids, []string{"a"}) {
		t.Fatalf("bounded: %v", ids)
	}
	f := by(catalog.MetricOrder{Step: "train", Name: "accuracy"})
	f.State = runstate.Succeeded
	if ids, _ = list(f); !slices.Equal(ids, []string{"d", "b", "a"}) {
		t.Fatalf("succeeded only: %v", ids)
	}
	if ids, _ = list(by(catalog.MetricOrder{Step: "train", Name: "loss"})); len(ids) != 0 {
		t.Fatalf("no run reported loss: %v", ids)
	}

	// A token is bound to its listing.
	page, err := s.ListRuns(ctx, by(catalog.MetricOrder{Step: "train", Name: "accuracy"}))
	if err != nil || page.NextPageToken == "" {
		t.Fatalf("%+v %v", page, err)
	}
	other := by(catalog.MetricOrder{Step: "train", Name: "accuracy", Ascending: true})
	other.PageToken = page.NextPageToken
	if _, err := s.ListRuns(ctx, other); !errors.Is(err, catalog.ErrInvalidArgument) {
		t.Fatalf("token of another order: %v", err)
	}
	plain := catalog.RunFilter{Project: "p", Pipeline: "train", PageToken: page.NextPageToken}
	if _, err := s.ListRuns(ctx, plain); !errors.Is(err, catalog.ErrInvalidArgument) {
		t.Fatalf("token of a metric listing on a plain one: %v", err)
	}
}
