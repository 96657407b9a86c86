package reconcile

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/workflows"
	"github.com/atelier-ml/atelier/workflows/runclient"
)

type fakeStore struct{ mirrored []workflows.RunStatus }

func (f *fakeStore) GetRun(context.Context, string, string) (catalog.Run, error) {
	return catalog.Run{}, catalog.ErrNotFound
}
func (f *fakeStore) ListUnfinishedRuns(context.Context, time.Time, int) ([]catalog.Run, error) {
	return nil, nil
}
func (f *fakeStore) MirrorRun(_ context.Context, s workflows.RunStatus) error {
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
		"terminated": {State: workflows.RunTerminated, Reason: "terminated through Temporal by \"ops\": oops", ClosedAt: closed},
	}
	running := &workflows.RunStatus{State: workflows.RunRunning, Seq: 7, Steps: []workflows.StepStatus{
		{Name: "a", State: workflows.StepSucceeded}, {Name: "b", State: workflows.StepRunning},
	}}
	for _, tc := range []struct {
		name    string
		run     catalog.Run
		want    workflows.RunState
		wantErr string
	}{
		{"still open", catalog.Run{ID: "open", State: workflows.RunRunning}, "", ""},
		{"terminated", catalog.Run{ID: "terminated", State: workflows.RunRunning, Status: running}, workflows.RunTerminated, "oops"},
		{"young pending without workflow: its start may be in flight", catalog.Run{ID: "gone", State: workflows.RunPending, CreatedAt: now.Add(-time.Minute)}, "", ""},
		{"old pending without workflow", catalog.Run{ID: "gone", State: workflows.RunPending, CreatedAt: now.Add(-time.Hour)}, workflows.RunFailed, "no workflow in Temporal"},
		{"already terminal", catalog.Run{ID: "terminated", State: workflows.RunSucceeded}, "", ""},
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
				if got.Steps[0].State != workflows.StepSucceeded || got.Steps[1].State != workflows.StepCancelled {
					t.Errorf("steps: %+v", got.Steps)
				}
				if tc.run.Status.Steps[1].State != workflows.StepRunning {
					t.Error("the stored status was modified in place")
				}
			}
		})
	}
}
