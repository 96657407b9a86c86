package retention_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/retention"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// TestSweepDeletesOnlyExpiredFinishedRunsAndTheirLogs runs the sweeper on a
// real Postgres: finished runs last written more than MaxAge ago go, with
// their logs, in several batches; recent runs and runs still in flight
// (however old) stay, with their logs.
func TestSweepDeletesOnlyExpiredFinishedRunsAndTheirLogs(t *testing.T) {
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := s.CreateProject(ctx, catalog.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}

	now := time.Now().UTC()
	// run creates a run in state, last written age ago, with two log chunks.
	run := func(id string, state runstate.State, age time.Duration) {
		t.Helper()
		if _, _, err := s.CreateRun(ctx, catalog.Run{ID: id, Project: "p", Workflow: runstate.PipelineWorkflowName}); err != nil {
			t.Fatal(err)
		}
		if state != runstate.Pending {
			if err := s.MirrorRun(ctx, runstate.Status{RunID: id, Project: "p", Workflow: runstate.PipelineWorkflowName, State: state, Seq: 1}); err != nil {
				t.Fatal(err)
			}
		}
		// and one item of a wide forEach
		if err := s.RecordItems(ctx, "p", id, "fan", []runstate.ItemRecord{{Index: 0, State: runstate.StepSucceeded, Item: 1.0, StartedAt: now, FinishedAt: now}}); err != nil {
			t.Fatal(err)
		}
		for i, chunk := range []string{"hello ", "world\n"} {
			if err := s.AppendLog(ctx, activities.LogKey{RunID: id, Step: "a", Item: -1, Attempt: 1}, int64(6*i), []byte(chunk)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, `UPDATE runs SET updated_at = $2 WHERE id = $1`, id, now.Add(-age)); err != nil {
			t.Fatal(err)
		}
	}
	const maxAge = 30 * 24 * time.Hour
	var expired []string
	for i := range 25 { // 25 expired: 3 batches of 10
		id := fmt.Sprintf("old-%02d", i)
		state := []runstate.State{runstate.Succeeded, runstate.Failed, runstate.Cancelled, runstate.Terminated}[i%4]
		run(id, state, maxAge+time.Duration(i+1)*time.Hour)
		expired = append(expired, id)
	}
	kept := []string{"recent-ok", "old-running", "old-pending", "old-cancelling", "just-inside"}
	run("recent-ok", runstate.Succeeded, time.Hour)
	run("old-running", runstate.Running, 2*maxAge)
	run("old-pending", runstate.Pending, 2*maxAge)
	run("old-cancelling", runstate.Cancelling, 2*maxAge)
	run("just-inside", runstate.Failed, maxAge-time.Minute)

	var batches []int
	var mu sync.Mutex
	counting := countingStore{Store: s, onBatch: func(n int64) { mu.Lock(); batches = append(batches, int(n)); mu.Unlock() }}
	sw := retention.New(counting, func() time.Time { return now }, zap.NewNop(), retention.Options{MaxAge: maxAge, BatchSize: 10, Pause: time.Millisecond})
	got, err := sw.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Runs != 25 || got.LogChunks != 50 || got.Items != 25 {
		t.Errorf("swept %+v, want 25 runs, 50 log chunks and 25 items", got)
	}
	if fmt.Sprint(batches) != "[10 10 5]" {
		t.Errorf("batches %v, want [10 10 5]", batches)
	}
	for _, id := range expired {
		if _, err := s.GetRun(ctx, "p", id); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("expired run %s: %v, want ErrNotFound", id, err)
		}
	}
	for _, id := range kept {
		if _, err := s.GetRun(ctx, "p", id); err != nil {
			t.Errorf("run %s should be kept: %v", id, err)
		}
		chunks, err := s.ReadLog(ctx, activities.LogKey{RunID: id, Step: "a", Item: -1, Attempt: 1}, 0, 0)
		if err != nil || len(chunks) != 2 {
			t.Errorf("logs of kept run %s: %d chunks, %v; want 2", id, len(chunks), err)
		}
	}
	var orphans int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM step_logs WHERE run_id LIKE 'old-%' AND run_id NOT IN ('old-running', 'old-pending', 'old-cancelling')`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if orphans != 0 {
		t.Errorf("%d log chunks of deleted runs left", orphans)
	}
	var items int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM step_items`).Scan(&items); err != nil {
		t.Fatal(err)
	}
	if items != len(kept) {
		t.Errorf("%d wide forEach items left, want the %d of the kept runs", items, len(kept))
	}
	again, err := sw.Sweep(ctx)
	if err != nil || again.Runs != 0 {
		t.Errorf("second sweep: %+v, %v; want nothing left to delete", again, err)
	}
}

// TestConcurrentSweepsTakeDisjointBatches: two gateways sweeping at once
// delete every expired run exactly once between them and neither blocks
// on the other's locked rows.
func TestConcurrentSweepsTakeDisjointBatches(t *testing.T) {
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	// 2,000 finished runs written 100 days ago, straight in SQL.
	if _, err := conn.Exec(ctx, `INSERT INTO runs (id, project, workflow, state, created_at, updated_at)
		SELECT 'r' || g, 'p', 'w', 'SUCCEEDED', now() - interval '100 days', now() - interval '100 days'
		FROM generate_series(1, 2000) g`); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var wg sync.WaitGroup
	totals := make([]store.Deleted, 2)
	errs := make([]error, 2)
	for i := range 2 {
		sw := retention.New(s, func() time.Time { return now }, zap.NewNop(), retention.Options{MaxAge: 24 * time.Hour, BatchSize: 50, Pause: time.Millisecond})
		wg.Go(func() { totals[i], errs[i] = sw.Sweep(ctx) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	var left int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if sum := totals[0].Runs + totals[1].Runs; sum != 2000 || left != 0 {
		t.Errorf("deleted %d + %d runs, %d left; want 2000 in all, none left", totals[0].Runs, totals[1].Runs, left)
	}
}

func TestDisabledSweeperReturnsAtOnce(t *testing.T) {
	sw := retention.New(nil, time.Now, zap.NewNop(), retention.Options{})
	done := make(chan struct{})
	go func() { sw.Run(t.Context()); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run of a disabled sweeper did not return")
	}
}

type countingStore struct {
	*store.Store
	onBatch func(int64)
}

func (c countingStore) DeleteFinishedRuns(ctx context.Context, before time.Time, limit int) (store.Deleted, error) {
	d, err := c.Store.DeleteFinishedRuns(ctx, before, limit)
	if err == nil {
		c.onBatch(d.Runs)
	}
	return d, err
}
