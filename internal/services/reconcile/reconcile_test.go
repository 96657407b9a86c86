package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

type fakeStore struct {
	mirrored []runstate.Status
	// rows are what GetRun finds (by ID), if anything.
	rows map[string]catalog.Run
	// unfinished are the rows ListUnfinishedRuns pages through (sorted by
	// UpdatedAt, ID); asked records the cursors it was called with.
	unfinished []catalog.Run
	asked      []catalog.RunKey
}

func (f *fakeStore) GetRun(_ context.Context, _, id string) (catalog.Run, error) {
	if r, ok := f.rows[id]; ok {
		return r, nil
	}
	return catalog.Run{}, catalog.ErrNotFound
}
func (f *fakeStore) ListUnfinishedRuns(_ context.Context, _ time.Time, after catalog.RunKey, limit int) ([]catalog.Run, error) {
	f.asked = append(f.asked, after)
	var out []catalog.Run
	for _, r := range f.unfinished {
		if r.UpdatedAt.After(after.UpdatedAt) || (r.UpdatedAt.Equal(after.UpdatedAt) && r.ID > after.ID) {
			out = append(out, r)
		}
		if len(out) == limit {
			break
		}
	}
	return out, nil
}
func (f *fakeStore) MirrorRun(_ context.Context, s runstate.Status) error {
	f.mirrored = append(f.mirrored, s)
	return nil
}

type fakeTemporal map[string]runclient.Closure // missing: not found

func (f fakeTemporal) Closure(_ context.Context, id string) (runclient.Closure, error) {
	c, ok := f[id]
	if !ok {
		return runclient.Closure{}, runclient.ErrRunNotFound
	}
	return c, nil
}
func (f fakeTemporal) ClosedOutside(context.Context, time.Time) (map[string]string, error) {
	return nil, nil
}

func TestConverge(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	closed := now.Add(-time.Minute)
	tmp := fakeTemporal{
		"open":       {Open: true},
		"terminated": {State: runstate.Terminated, Reason: "terminated through Temporal by \"ops\": oops", ClosedAt: closed},
	}
	running := &runstate.Status{State: runstate.Running, Seq: 7, Steps: []runstate.StepStatus{
		{Name: "a", State: runstate.StepSucceeded}, {Name: "b", State: runstate.StepRunning},
	}}
	for _, tc := range []struct {
		name    string
		run     catalog.Run
		want    runstate.State
		wantErr string
	}{
		{"still open", catalog.Run{ID: "open", State: runstate.Running}, "", ""},
		{"terminated", catalog.Run{ID: "terminated", State: runstate.Running, Status: running}, runstate.Terminated, "oops"},
		{"young pending without workflow: its start may be in flight", catalog.Run{ID: "gone", State: runstate.Pending, CreatedAt: now.Add(-time.Minute)}, "", ""},
		{"old pending without workflow", catalog.Run{ID: "gone", State: runstate.Pending, CreatedAt: now.Add(-time.Hour)}, runstate.Failed, "no workflow in Temporal"},
		{"already terminal", catalog.Run{ID: "terminated", State: runstate.Succeeded}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &fakeStore{}
			r := New(st, tmp, func() time.Time { return now }, zap.NewNop(), Options{Namespace: "ns"})
			got, changed, err := r.Converge(context.Background(), tc.run)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if changed || len(st.mirrored) != 0 {
					t.Fatalf("changed a run it should have left: %+v", got)
				}
				return
			}
			if !changed || len(st.mirrored) != 1 || got.State != tc.want || !strings.Contains(got.Error, tc.wantErr) {
				t.Fatalf("got %+v (changed %v, %d writes), want %s with %q", got, changed, len(st.mirrored), tc.want, tc.wantErr)
			}
			if tc.run.Status != nil {
				if got.Seq != tc.run.Status.Seq+1 {
					t.Errorf("seq %d, want %d: the workflow's own later writes must still win", got.Seq, tc.run.Status.Seq+1)
				}
				if got.Steps[0].State != runstate.StepSucceeded || got.Steps[1].State != runstate.StepCancelled {
					t.Errorf("steps: %+v", got.Steps)
				}
				if tc.run.Status.Steps[1].State != runstate.StepRunning {
					t.Error("the stored status was modified in place")
				}
			}
		})
	}
}

// A caller's row may be older than the workflow's last mirror write (a GET
// that raced the run's end): Converge reads the row again and returns the
// final status the workflow mirrored, result and all, writing nothing.
func TestConvergeReadsTheRowAgain(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	final := &runstate.Status{State: runstate.Succeeded, Seq: 9, Result: map[string]any{"deployed": true}}
	st := &fakeStore{rows: map[string]catalog.Run{"done": {ID: "done", State: runstate.Succeeded, Status: final}}}
	tmp := fakeTemporal{"done": {State: runstate.Succeeded, ClosedAt: now}}
	r := New(st, tmp, func() time.Time { return now }, zap.NewNop(), Options{Namespace: "ns"})
	stale := catalog.Run{ID: "done", State: runstate.Running, Status: &runstate.Status{State: runstate.Running, Seq: 8}}
	got, changed, err := r.Converge(context.Background(), stale)
	if err != nil || !changed || got.Seq != 9 || got.Result == nil || len(st.mirrored) != 0 {
		t.Fatalf("got %+v, changed %v, err %v, %d writes", got, changed, err, len(st.mirrored))
	}
}

// Runs that stay in flight for long must not be the only ones the
// stale-row sweep ever checks: each sweep resumes after the last run the
// previous one saw, and starts over after the end.
func TestStaleSweepPagesThroughEveryRun(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	st := &fakeStore{}
	tmp := fakeTemporal{}
	for i := range staleBatch + 50 {
		id := fmt.Sprintf("run-%04d", i)
		st.unfinished = append(st.unfinished, catalog.Run{ID: id, State: runstate.Running, UpdatedAt: now.Add(-time.Hour)})
		tmp[id] = runclient.Closure{Open: true}
	}
	// The last run closed outside Atelier; only a sweep that reaches it
	// can converge it.
	last := st.unfinished[len(st.unfinished)-1].ID
	tmp[last] = runclient.Closure{State: runstate.Terminated, Reason: "terminated", ClosedAt: now}
	r := New(st, tmp, func() time.Time { return now }, zap.NewNop(), Options{})

	for range 3 {
		if err := r.sweepStale(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	first := st.unfinished[staleBatch-1]
	want := []catalog.RunKey{{}, {UpdatedAt: first.UpdatedAt, ID: first.ID}, {}}
	if len(st.asked) != 3 || st.asked[0] != want[0] || st.asked[1] != want[1] || st.asked[2] != want[2] {
		t.Fatalf("cursors asked %v, want %v", st.asked, want)
	}
	if len(st.mirrored) == 0 || st.mirrored[0].RunID != last || st.mirrored[0].State != runstate.Terminated {
		t.Fatalf("the run past the first page was not converged: %+v", st.mirrored)
	}
}
