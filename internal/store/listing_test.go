package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// listingRows is how many runs TestListingPlans generates by default:
// enough for the planner to see a large table (20,000 in the big project),
// small enough to load in seconds. ATELIER_LISTING_ROWS=1000000 checks the
// plans at the size bench/listruns measures (a few minutes).
const listingRows = 200_000

// recorder keeps the last query the store sent.
type recorder struct {
	mu   sync.Mutex
	sql  string
	args []any
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	r.sql, r.args = d.SQL, d.Args
	r.mu.Unlock()
	return ctx
}

func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recorder) last() (string, []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sql, r.args
}

// TestListingPlans lists runs with every combination of filters the API
// offers (pipeline, state, createdBy, a createdAfter/createdBefore window;
// project always) over generated rows, and EXPLAIN ANALYZEs the exact
// statement the store sent with the arguments it sent, planned as the
// store has it planned (a custom plan per execution: see customPlans in
// store.go, which says why not generic plans). Each must read one range of the index made for that
// combination, in order: no Seq Scan, no Sort, no Bitmap scan, no row read
// and dropped by a filter, and a few buffers for a page of 50, first page
// and next page alike.
func TestListingPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 200,000 rows")
	}
	rows := listingRows
	if v := os.Getenv("ATELIER_LISTING_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("ATELIER_LISTING_ROWS=%q: want a number >= 1000", v)
		}
		rows = n
	}
	ctx := t.Context()
	s, conn, rec := openWithConn(t)
	end := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	start := time.Now()
	if err := storetest.LoadSyntheticRuns(ctx, conn, storetest.Synthetic{N: rows, Projects: 50, End: end}, 100_000, nil); err != nil {
		t.Fatal(err)
	}
	// One run in five was started by one of four schedules.
	if _, err := conn.Exec(ctx, "UPDATE runs SET schedule = 'sc-' || (abs(hashtext(id)) % 4) WHERE abs(hashtext(id)) % 5 = 0"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
		t.Fatal(err)
	}
	t.Logf("loaded %d runs in %s", rows, time.Since(start).Round(time.Millisecond))

	recent, old := end.Add(-30*24*time.Hour), end.Add(-200*24*time.Hour)
	windows := []struct {
		name          string
		after, before *time.Time
	}{
		{"all time", nil, nil},
		{"last 30 days", &recent, nil},
		{"a closed window 200 days ago", &old, ptr(old.Add(10 * 24 * time.Hour))},
		{"a 60-day window (thousands of runs)", &old, ptr(old.Add(60 * 24 * time.Hour))},
	}
	type combo struct {
		pipeline, state, by, schedule bool
		index                         string
	}
	combos := []combo{
		{index: "runs_project_created_idx"},
		{pipeline: true, index: "runs_project_pipeline_created_idx"},
		{state: true, index: "runs_project_state_created_idx"},
		{pipeline: true, state: true, index: "runs_project_pipeline_state_created_idx"},
		{by: true, index: "runs_project_creator_created_idx"},
		{by: true, state: true, index: "runs_project_creator_state_created_idx"},
		{by: true, pipeline: true, index: "runs_project_creator_pipeline_created_idx"},
		{by: true, pipeline: true, state: true, index: "runs_project_creator_pipeline_state_created_idx"},
		{schedule: true, index: "runs_project_schedule_created_idx"},
		{schedule: true, state: true, index: "runs_project_schedule_state_created_idx"},
	}
	for _, c := range combos {
		states := []string{""}
		if c.state {
			states = []string{"SUCCEEDED", "PENDING"} // the most and a rarely matching one
		}
		for _, project := range []string{"p000", "p017"} {
			for _, state := range states {
				for _, w := range windows {
					f := catalog.RunFilter{Project: project, State: runstate.State(state), CreatedAfter: w.after, CreatedBefore: w.before, Limit: 50}
					if c.pipeline {
						f.Pipeline = "pl-3"
					}
					if c.by {
						f.CreatedBy = "tok-2"
					}
					if c.schedule {
						f.Schedule = "sc-1"
					}
					name := fmt.Sprintf("%s pipeline=%q state=%q createdBy=%q schedule=%q %s", project, f.Pipeline, f.State, f.CreatedBy, f.Schedule, w.name)
					t.Run(name, func(t *testing.T) {
						for page := 1; page <= 2; page++ {
							got, err := s.ListRuns(ctx, f)
							if err != nil {
								t.Fatal(err)
							}
							checkPage(t, got, f)
							sql, args := rec.last()
							for _, mode := range []string{"force_custom_plan"} { // the store never lets them go generic (customPlans)
								plan := explain(t, conn, sql, args, mode)
								checkPlan(t, fmt.Sprintf("page %d, %s", page, mode), plan, c.index)
							}
							if got.NextPageToken == "" {
								break
							}
							f.PageToken = got.NextPageToken
						}
					})
				}
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// checkPage checks that the rows match the filter, newest first.
func checkPage(t *testing.T, p catalog.RunPage, f catalog.RunFilter) {
	t.Helper()
	for i, r := range p.Runs {
		ok := r.Project == f.Project &&
			(f.Pipeline == "" || r.Pipeline == f.Pipeline) &&
			(f.State == "" || r.State == f.State) &&
			(f.CreatedBy == "" || r.CreatedBy == f.CreatedBy) &&
			(f.CreatedAfter == nil || !r.CreatedAt.Before(*f.CreatedAfter)) &&
			(f.CreatedBefore == nil || r.CreatedAt.Before(*f.CreatedBefore))
		if !ok {
			t.Fatalf("run %d %+v does not match the filter", i, r)
		}
		if i > 0 && !r.CreatedAt.Before(p.Runs[i-1].CreatedAt) {
			t.Fatalf("runs %d and %d out of order", i-1, i)
		}
	}
}

// explain EXPLAIN ANALYZEs sql as a prepared statement in plan cache mode
// mode, with args written as literals.
func explain(t *testing.T, conn *pgx.Conn, sql string, args []any, mode string) map[string]any {
	t.Helper()
	ctx := t.Context()
	var lits []string
	for _, a := range args {
		if _, ok := a.(pgx.QueryExecMode); ok {
			continue // how the store runs it, not a parameter
		}
		lits = append(lits, literal(t, a))
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "PREPARE listing AS "+sql); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(context.Background(), "DEALLOCATE listing")
	var out []byte
	q := fmt.Sprintf("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE listing(%s)", strings.Join(lits, ", "))
	if err := conn.QueryRow(ctx, q, pgx.QueryExecModeSimpleProtocol).Scan(&out); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	var plans []map[string]any
	if err := json.Unmarshal(out, &plans); err != nil {
		t.Fatal(err)
	}
	return plans[0]["Plan"].(map[string]any)
}

func literal(t *testing.T, a any) string {
	switch v := a.(type) {
	case nil:
		return "NULL"
	case string:
		return "'" + strings.ReplaceAll(v, "'", "''") + "'"
	case *string:
		if v == nil {
			return "NULL"
		}
		return literal(t, *v)
	case time.Time:
		return "'" + v.Format(time.RFC3339Nano) + "'"
	case *time.Time:
		if v == nil {
			return "NULL"
		}
		return literal(t, *v)
	case int32, int64, int:
		return fmt.Sprint(v)
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64) + "::float8"
	case *float64:
		if v == nil {
			return "NULL"
		}
		return literal(t, *v)
	}
	t.Fatalf("no literal for %T", a)
	return ""
}

// checkPlan walks the plan. Every condition must be an index condition of
// wantIndex (no row read and then dropped by a filter, no Seq Scan), and
// the rows come either in order from an Index Scan that stops after the
// page, or, where the planner knows the matches to be few, from a Bitmap
// scan of that index followed by a Sort of those matches only (at most
// 1,000 here). Buffers: a few index pages plus at most two per row read
// (its heap page, and index leaf pages crossed).
func checkPlan(t *testing.T, what string, plan map[string]any, wantIndex string) {
	t.Helper()
	var scans []string
	var sorted, read float64
	var walk func(n map[string]any)
	walk = func(n map[string]any) {
		typ, _ := n["Node Type"].(string)
		rows, _ := n["Actual Rows"].(float64)
		switch typ {
		case "Seq Scan", "Incremental Sort":
			t.Errorf("%s: plan has a %s:\n%s", what, typ, dump(plan))
		case "Sort":
			sorted = max(sorted, rows)
		case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
			scans = append(scans, n["Index Name"].(string))
		}
		if typ == "Index Scan" || typ == "Bitmap Heap Scan" {
			read = max(read, rows)
		}
		for _, k := range []string{"Rows Removed by Filter", "Rows Removed by Index Recheck"} {
			if removed, _ := n[k].(float64); removed > 0 {
				t.Errorf("%s: %s: %s %v:\n%s", what, typ, k, removed, dump(plan))
			}
		}
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	walk(plan)
	hitB, _ := plan["Shared Hit Blocks"].(float64)
	readB, _ := plan["Shared Read Blocks"].(float64)
	t.Logf("%s: %s, %v rows read, %v sorted, %v buffers", what, strings.Join(nodeTypes(plan), " > "), read, sorted, hitB+readB)
	// Where the range holds a handful of rows, any index of a prefix of the
	// filters costs the same and the planner may pick it; it still may not
	// drop rows by a filter (checked above).
	if len(scans) != 1 || (scans[0] != wantIndex && read > 10) {
		t.Errorf("%s: index scans %v reading %v rows, want one of %s:\n%s", what, scans, read, wantIndex, dump(plan))
	}
	if sorted > 1000 {
		t.Errorf("%s: sorts %v rows, want at most 1,000:\n%s", what, sorted, dump(plan))
	}
	hit, _ := plan["Shared Hit Blocks"].(float64)
	rd, _ := plan["Shared Read Blocks"].(float64)
	if hit+rd > 20+2*read {
		t.Errorf("%s: %v buffers for %v rows read, want <= 20 + 2 per row:\n%s", what, hit+rd, read, dump(plan))
	}
}

func nodeTypes(n map[string]any) []string {
	out := []string{n["Node Type"].(string)}
	if ix, ok := n["Index Name"].(string); ok {
		out[0] += " " + ix
	}
	children, _ := n["Plans"].([]any)
	for _, c := range children {
		out = append(out, nodeTypes(c.(map[string]any))...)
	}
	return out
}

func dump(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}
