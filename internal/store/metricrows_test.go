package store_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// openWithConn is newStore with a connection of its own to the same
// database (to read run_metrics directly) and the store's last query.
func openWithConn(t *testing.T) (*store.Store, *pgx.Conn, *recorder) {
	t.Helper()
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	rec := &recorder{}
	s, err := store.Open(ctx, url, store.WithTracer(rec))
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
	return s, conn, rec
}

// metricRows reads a run's run_metrics rows as "step.name=value".
func metricRowsOf(t *testing.T, conn *pgx.Conn, run string) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), "SELECT step || '.' || name || '=' || value::text FROM run_metrics WHERE run_id = $1 ORDER BY step, name", run)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A mirrored status's scalar metrics are rows of run_metrics: written
// with the status, replaced when a newer status is written (a changed
// value, a metric gone) on either mirror path (with and without events),
// untouched by a stale write, of the first step of a name, only for runs
// of a pipeline, deleted with their run; the migration's backfill builds
// the same rows from the stored statuses. Listings by metric are of the
// project's runs only.
func TestRunMetricRows(t *testing.T) {
	s, conn, _ := openWithConn(t)
	ctx := t.Context()
	mustProject(t, s, "p")
	mustProject(t, s, "q")
	at := time.Now().Add(-time.Hour)
	mirror := func(project, id, pipeline string, seq int64, state runstate.State, steps ...runstate.StepStatus) {
		t.Helper()
		at = at.Add(time.Second)
		created := at
		st := runstate.Status{RunID: id, Project: project, Pipeline: pipeline, Workflow: runstate.PipelineWorkflowName,
			State: state, Seq: seq, StartedAt: &created, Steps: steps}
		if pipeline == "" {
			st.Workflow = "GoPipeline"
		}
		if err := s.MirrorRun(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	step := func(name string, scalars map[string]float64) runstate.StepStatus {
		return runstate.StepStatus{Name: name, State: runstate.StepSucceeded, Metrics: &runstate.Metrics{Scalars: scalars}}
	}
	want := func(run string, rows ...string) {
		t.Helper()
		if got := metricRowsOf(t, conn, run); !slices.Equal(got, rows) {
			t.Fatalf("run %s: rows %q, want %q", run, got, rows)
		}
	}

	mirror("p", "a", "train", 1, runstate.Running, step("train", map[string]float64{"accuracy": 0.5, "loss": 2}))
	want("a", "train.accuracy=0.5", "train.loss=2")
	// A newer status, with events (the run's end): a value changes, a
	// metric is gone, another step's arrives.
	mirror("p", "a", "train", 2, runstate.Succeeded, step("train", map[string]float64{"accuracy": 0.75}), step("eval", map[string]float64{"f1": 0.25}))
	want("a", "eval.f1=0.25", "train.accuracy=0.75")
	// A stale status changes nothing.
	mirror("p", "a", "train", 1, runstate.Running, step("train", map[string]float64{"accuracy": 0.1}))
	want("a", "eval.f1=0.25", "train.accuracy=0.75")
	// The same status again (a retried activity) neither.
	mirror("p", "a", "train", 2, runstate.Succeeded, step("train", map[string]float64{"accuracy": 0.75}), step("eval", map[string]float64{"f1": 0.25}))
	want("a", "eval.f1=0.25", "train.accuracy=0.75")
	// Two steps of one name: the first's value, as listings always read it.
	mirror("p", "b", "train", 1, runstate.Running, step("train", map[string]float64{"accuracy": 0.25}), step("train", map[string]float64{"accuracy": 0.9, "loss": 1}))
	want("b", "train.accuracy=0.25", "train.loss=1")
	// A newer status without metrics clears them.
	mirror("p", "b", "train", 2, runstate.Running, runstate.StepStatus{Name: "train", State: runstate.StepRunning})
	want("b")
	mirror("p", "b", "train", 3, runstate.Succeeded, step("train", map[string]float64{"accuracy": 0.5}))
	want("b", "train.accuracy=0.5")
	// A Go workflow's run has no rows.
	mirror("p", "go", "", 1, runstate.Succeeded, step("train", map[string]float64{"accuracy": 1}))
	want("go")
	// Another project's run of a pipeline of the same name.
	mirror("q", "c", "train", 1, runstate.Succeeded, step("train", map[string]float64{"accuracy": 0.99}))
	want("c", "train.accuracy=0.99")
	// A status of another project for a's id is ignored, rows too.
	mirror("q", "a", "train", 9, runstate.Succeeded, step("train", map[string]float64{"accuracy": 0.01}))
	want("a", "eval.f1=0.25", "train.accuracy=0.75")

	list := func(project string) []string {
		t.Helper()
		page, err := s.ListRuns(ctx, catalog.RunFilter{Project: project, Pipeline: "train", ByMetric: &catalog.MetricOrder{Step: "train", Name: "accuracy"}})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range page.Runs {
			out = append(out, fmt.Sprintf("%s=%g", r.ID, *r.MetricValue))
		}
		return out
	}
	if got := list("p"); !slices.Equal(got, []string{"a=0.75", "b=0.5"}) {
		t.Fatalf("p: %v", got)
	}
	if got := list("q"); !slices.Equal(got, []string{"c=0.99"}) {
		t.Fatalf("q: %v", got)
	}

	// The migration's backfill, run again over the stored statuses,
	// rebuilds exactly these rows.
	var before []string
	for _, id := range []string{"a", "b", "c", "go"} {
		before = append(before, metricRowsOf(t, conn, id)...)
	}
	if _, err := conn.Exec(ctx, "DELETE FROM run_metrics"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, backfillSQL(t)); err != nil {
		t.Fatal(err)
	}
	var after []string
	for _, id := range []string{"a", "b", "c", "go"} {
		after = append(after, metricRowsOf(t, conn, id)...)
	}
	if !slices.Equal(before, after) {
		t.Fatalf("backfill: %q, mirrored: %q", after, before)
	}

	// Deleted with the run (DeleteRun here; retention deletes runs too).
	if err := s.DeleteRun(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	want("a")
	if got := list("p"); !slices.Equal(got, []string{"b=0.5"}) {
		t.Fatalf("p after delete: %v", got)
	}
}

// backfillSQL is the INSERT of migrations/00019_run_metrics.sql.
func backfillSQL(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("migrations/00019_run_metrics.sql")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "INSERT INTO run_metrics")
	j := strings.Index(s, "-- +goose Down")
	if i < 0 || j < i {
		t.Fatal("no backfill INSERT in the migration")
	}
	return s[i:j]
}

// A listing by metric over many runs reads one range of run_metrics'
// index in order (no Seq Scan, no Sort of the pipeline's runs), either
// way and on a later page, and the pages walk the runs in exactly the
// order by value, ties newest first, without a gap or a repeat.
func TestListRunsByMetricPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 40,000 runs")
	}
	s, conn, rec := openWithConn(t)
	ctx := t.Context()
	// 40,000 runs in 4 projects and 2 pipelines, each with two metrics
	// of 500 distinct values (ties across pages).
	for _, q := range []string{
		`INSERT INTO runs (id, project, pipeline, workflow, state, created_at)
		 SELECT 'r' || g, 'p' || (g % 4), 'pl-' || (g / 4 % 2), 'w', CASE WHEN g % 3 = 0 THEN 'FAILED' ELSE 'SUCCEEDED' END,
		        timestamptz '2026-11-01' - g * interval '1 second'
		 FROM generate_series(1, 40000) g`,
		`INSERT INTO run_metrics (run_id, project, pipeline, created_at, step, name, value)
		 SELECT id, project, pipeline, created_at, 'train', m, (abs(hashtext(id || m)) % 500) / 500.0
		 FROM runs, unnest(ARRAY['accuracy', 'loss']) m`,
		`ANALYZE runs`, `ANALYZE run_metrics`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, asc := range []bool{false, true} {
		for _, state := range []runstate.State{"", runstate.Succeeded} {
			t.Run(fmt.Sprintf("ascending=%t state=%q", asc, state), func(t *testing.T) {
				lo := 0.2
				order := "value DESC"
				if asc {
					order = "value"
				}
				rows, err := conn.Query(ctx, `SELECT m.run_id FROM run_metrics m JOIN runs r ON r.id = m.run_id
					WHERE m.project = 'p1' AND m.pipeline = 'pl-1' AND m.step = 'train' AND m.name = 'accuracy' AND m.value >= 0.2
					  AND ($1 = '' OR r.state = $1)
					ORDER BY m.`+order+`, m.created_at DESC, m.run_id DESC`, string(state))
				if err != nil {
					t.Fatal(err)
				}
				wantIDs, err := pgx.CollectRows(rows, pgx.RowTo[string])
				if err != nil {
					t.Fatal(err)
				}
				f := catalog.RunFilter{Project: "p1", Pipeline: "pl-1", State: state, Limit: 50,
					ByMetric: &catalog.MetricOrder{Step: "train", Name: "accuracy", Ascending: asc, Min: &lo}}
				var ids []string
				for page := 1; ; page++ {
					got, err := s.ListRuns(ctx, f)
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range got.Runs {
						ids = append(ids, r.ID)
					}
					if page <= 2 || got.NextPageToken == "" {
						sql, args := rec.last()
						checkMetricPlan(t, fmt.Sprintf("page %d", page), explain(t, conn, sql, args, "force_custom_plan"), asc, state != "")
					}
					if got.NextPageToken == "" {
						break
					}
					f.PageToken = got.NextPageToken
				}
				if !slices.Equal(ids, wantIDs) {
					t.Fatalf("paged %d runs, want %d in the order of the query (first differences at %d)", len(ids), len(wantIDs), firstDiff(ids, wantIDs))
				}
			})
		}
	}
}

func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// checkMetricPlan: run_metrics read through its index of the order (no
// Seq Scan; in order, or a Sort of at most 1,000 rows where the planner
// knows the range to be that small, as on a last page), stopping after
// the page: at most the page plus the ties at the cursor, or, with a
// state the runs filter, twice that (a third of these runs failed).
func checkMetricPlan(t *testing.T, what string, plan map[string]any, asc, byState bool) {
	t.Helper()
	wantIndex := "run_metrics_desc_idx"
	if asc {
		wantIndex = "run_metrics_asc_idx"
	}
	var read float64
	var found bool
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		typ, _ := n["Node Type"].(string)
		switch typ {
		case "Seq Scan", "Incremental Sort":
			t.Errorf("%s: plan has a %s:\n%s", what, typ, dump(plan))
		case "Sort": // where the planner knows the range to hold few rows
			if rows, _ := n["Actual Rows"].(float64); rows > 1000 {
				t.Errorf("%s: sorts %v rows:\n%s", what, rows, dump(plan))
			}
		}
		// A bitmap (followed by the Sort) reads either index alike.
		if ix, _ := n["Index Name"].(string); ix == wantIndex ||
			typ == "Bitmap Index Scan" && (ix == "run_metrics_asc_idx" || ix == "run_metrics_desc_idx") {
			found = true
			rows, _ := n["Actual Rows"].(float64)
			removed, _ := n["Rows Removed by Filter"].(float64)
			read = rows + removed
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plan)
	t.Logf("%s: %s, %v metric rows read", what, strings.Join(nodeTypes(plan), " > "), read)
	if !found {
		t.Fatalf("%s: no scan of %s:\n%s", what, wantIndex, dump(plan))
	}
	limit := 51.0 + 20 // the page and one more, plus the ties at the cursor
	if byState {
		limit *= 2
	}
	if read > limit {
		t.Errorf("%s: read %v metric rows for a page of 50, want at most %v:\n%s", what, read, limit, dump(plan))
	}
}
