// Command listruns measures run listing over 1,000,000 runs in 100
// projects: every filter the API offers, through the store and through the
// REST handler, against a primary-key lookup in the same run. See
// bench/doc.go.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api"
	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// Targets printed next to the figures (never asserted).
const targetP99 = 20 * time.Millisecond

func main() {
	n := flag.Int("n", 1_000_000, "runs to generate")
	projects := flag.Int("projects", 100, "projects (p000 holds 10% of the runs)")
	samples := flag.Int("samples", 200, "samples per filter per mode per round")
	rounds := flag.Int("rounds", 3, "rounds (the spread column is the min–max of the per-round p50)")
	pageSize := flag.Int("page", 50, "page size")
	quick := flag.Bool("quick", false, "smoke run: -n 100000 -samples 30 -rounds 1 unless given")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["n"] {
			*n = 100_000
		}
		if !set["samples"] {
			*samples = 30
		}
		if !set["rounds"] {
			*rounds = 1
		}
	}
	if *n < 1000 || *projects < 2 || *samples < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "listruns: need -n >= 1000, -projects >= 2, positive -samples and -rounds")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *n, *projects, *samples, *rounds, *pageSize); err != nil {
		fmt.Fprintln(os.Stderr, "listruns:", err)
		os.Exit(1)
	}
}

// filter is one measured listing: a RunFilter drawn at random per sample
// (project, pipeline, creator, window), so that successive samples read
// different index ranges rather than one hot page.
type filter struct {
	name string
	make func(r *rand.Rand) catalog.RunFilter
	// deep: walk this many pages with the cursor and time the last one.
	deep int
}

type mode struct {
	name string
	do   func(ctx context.Context, f catalog.RunFilter) (int, error) // rows returned
}

func run(ctx context.Context, n, projects, samples, rounds, pageSize int) error {
	st, err := benchstack.StartDatabase(ctx, "listruns")
	if err != nil {
		return err
	}
	defer st.Close()

	conn, err := pgx.Connect(ctx, st.Cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	end := time.Now().UTC().Truncate(time.Second)
	loadStart := time.Now()
	err = storetest.LoadSyntheticRuns(ctx, conn, storetest.Synthetic{N: n, Projects: projects, End: end}, 100_000, func(done int) {
		benchstack.Logf("loaded %d/%d runs (%s)", done, n, time.Since(loadStart).Round(time.Second))
	})
	if err != nil {
		return err
	}
	load := time.Since(loadStart)
	vacStart := time.Now()
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE runs"); err != nil {
		return err
	}
	vacuum := time.Since(vacStart)
	sizes, err := relationSizes(ctx, conn)
	if err != nil {
		return err
	}
	var bigRuns, typicalRuns int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE project = 'p000'), count(*) FILTER (WHERE project = 'p042') FROM runs`).Scan(&bigRuns, &typicalRuns); err != nil {
		return err
	}
	ids, err := sampleIDs(ctx, conn, 5000)
	if err != nil {
		return err
	}

	// The REST handler, in-process (no TCP): auth (token lookup in
	// Postgres), validation, the store, JSON. A viewer token of each
	// project used.
	h, err := api.New(st.Store, stubEngine{})
	if err != nil {
		return err
	}
	secrets := map[string]string{}
	for i := range projects {
		p := fmt.Sprintf("p%03d", i)
		if _, err := st.Store.CreateProject(ctx, catalog.Project{Name: p}); err != nil {
			return err
		}
		secret, hash := tokens.New()
		if _, err := st.Store.CreateToken(ctx, catalog.Token{Name: "bench-viewer", Project: p, Role: tokens.RoleViewer}, hash); err != nil {
			return err
		}
		secrets[p] = secret
	}

	pick := func(r *rand.Rand, prefix string, k int) string { return fmt.Sprintf("%s%d", prefix, r.IntN(k)) }
	typical := func(r *rand.Rand) string { return fmt.Sprintf("p%03d", 1+r.IntN(projects-1)) }
	window := func(r *rand.Rand, days int) (*time.Time, *time.Time) {
		from := end.Add(-time.Duration(days+r.IntN(365-days)) * 24 * time.Hour)
		to := from.Add(time.Duration(days) * 24 * time.Hour)
		return &from, &to
	}
	recent := func(days int) *time.Time { t := end.Add(-time.Duration(days) * 24 * time.Hour); return &t }
	state := func(r *rand.Rand) runstate.State { // weighted like the data: mostly the common ones
		return runstate.State(storetest.SyntheticStates[r.IntN(len(storetest.SyntheticStates))])
	}
	filters := []filter{
		{name: "project p000 (100k runs)", make: func(*rand.Rand) catalog.RunFilter { return catalog.RunFilter{Project: "p000"} }},
		{name: "project (a typical one)", make: func(r *rand.Rand) catalog.RunFilter { return catalog.RunFilter{Project: typical(r)} }},
		{name: "p000, page 20 (cursor)", deep: 20, make: func(*rand.Rand) catalog.RunFilter { return catalog.RunFilter{Project: "p000"} }},
		{name: "p000 + pipeline", make: func(r *rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", Pipeline: pick(r, "pl-", 20)}
		}},
		{name: "p000 + state (any of 7)", make: func(r *rand.Rand) catalog.RunFilter { return catalog.RunFilter{Project: "p000", State: state(r)} }},
		{name: "p000 + state PENDING (1%)", make: func(*rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", State: runstate.Pending}
		}},
		{name: "p000 + pipeline + state", make: func(r *rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", Pipeline: pick(r, "pl-", 20), State: state(r)}
		}},
		{name: "p000 + createdBy", make: func(r *rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", CreatedBy: pick(r, "tok-", 8)}
		}},
		{name: "p000 + createdBy + state", make: func(r *rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", CreatedBy: pick(r, "tok-", 8), State: state(r)}
		}},
		{name: "p000 + createdBy + pipeline", make: func(r *rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", CreatedBy: pick(r, "tok-", 8), Pipeline: pick(r, "pl-", 20)}
		}},
		{name: "p000 + createdBy + pipeline + state", make: func(r *rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", CreatedBy: pick(r, "tok-", 8), Pipeline: pick(r, "pl-", 20), State: state(r)}
		}},
		{name: "p000 + createdAfter (last 7 days)", make: func(*rand.Rand) catalog.RunFilter {
			return catalog.RunFilter{Project: "p000", CreatedAfter: recent(7)}
		}},
		{name: "p000 + a 7-day window (random)", make: func(r *rand.Rand) catalog.RunFilter {
			a, b := window(r, 7)
			return catalog.RunFilter{Project: "p000", CreatedAfter: a, CreatedBefore: b}
		}},
		{name: "p000 + 30-day window + pipeline + state", make: func(r *rand.Rand) catalog.RunFilter {
			a, b := window(r, 30)
			return catalog.RunFilter{Project: "p000", Pipeline: pick(r, "pl-", 20), State: state(r), CreatedAfter: a, CreatedBefore: b}
		}},
		{name: "typical + 30-day window + createdBy + state", make: func(r *rand.Rand) catalog.RunFilter {
			a, b := window(r, 30)
			return catalog.RunFilter{Project: typical(r), CreatedBy: pick(r, "tok-", 8), State: state(r), CreatedAfter: a, CreatedBefore: b}
		}},
	}

	storeMode := mode{name: "store", do: func(ctx context.Context, f catalog.RunFilter) (int, error) {
		p, err := st.Store.ListRuns(ctx, f)
		return len(p.Runs), err
	}}
	restMode := mode{name: "REST", do: func(ctx context.Context, f catalog.RunFilter) (int, error) {
		return restList(ctx, h, secrets[f.Project], f)
	}}
	baseline := func(ctx context.Context, r *rand.Rand) error {
		id := ids[r.IntN(len(ids))]
		_, err := st.Store.GetRun(ctx, id.project, id.id)
		return err
	}

	type result struct {
		lat      [2][]time.Duration   // store, REST
		perRound [2][][]time.Duration // per round
		base     []time.Duration
		rows     int
		n        int
	}
	results := make([]result, len(filters))
	for i := range results {
		results[i].perRound = [2][][]time.Duration{make([][]time.Duration, rounds), make([][]time.Duration, rounds)}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	// Warm-up: every filter once per mode.
	for _, f := range filters {
		for _, m := range []mode{storeMode, restMode} {
			if _, err := m.do(ctx, withLimit(f.make(rng), pageSize)); err != nil {
				return fmt.Errorf("%s (%s): %w", f.name, m.name, err)
			}
		}
	}
	benchStart := time.Now()
	for round := range rounds {
		for i, f := range filters {
			res := &results[i]
			for range samples {
				// baseline, store, REST: interleaved per sample.
				t0 := time.Now()
				if err := baseline(ctx, rng); err != nil {
					return fmt.Errorf("baseline: %w", err)
				}
				res.base = append(res.base, time.Since(t0))
				for mi, m := range []mode{storeMode, restMode} {
					flt := withLimit(f.make(rng), pageSize)
					for range f.deep - 1 { // walk to the page measured
						p, err := st.Store.ListRuns(ctx, flt)
						if err != nil {
							return err
						}
						if p.NextPageToken == "" {
							break
						}
						flt.PageToken = p.NextPageToken
					}
					t0 := time.Now()
					rows, err := m.do(ctx, flt)
					d := time.Since(t0)
					if err != nil {
						return fmt.Errorf("%s (%s): %w", f.name, m.name, err)
					}
					res.lat[mi] = append(res.lat[mi], d)
					res.perRound[mi][round] = append(res.perRound[mi][round], d)
					if mi == 0 {
						res.rows += rows
						res.n++
					}
				}
			}
		}
		benchstack.Logf("round %d/%d done (%s)", round+1, rounds, time.Since(benchStart).Round(time.Second))
	}

	// Report.
	out := os.Stdout
	fmt.Fprintf(out, "# Listing runs at scale (listruns)\n\n")
	st.Info.Print(out)
	fmt.Fprintf(out, "Data: %d runs in %d projects (p000: %d, p042: %d), 20 pipelines and 8 creators per project, 7 states; loaded with generate_series (indexes rebuilt after) in %s, VACUUM ANALYZE %s. Page size %d; %d rounds × %d samples per filter and mode, baseline/store/REST interleaved per sample; filter values drawn at random per sample.\n\n",
		n, projects, bigRuns, typicalRuns, load.Round(time.Second), vacuum.Round(time.Second), pageSize, rounds, samples)
	fmt.Fprintf(out, "Sizes: %s\n\n", sizes)
	fmt.Fprintln(out, "| filter | rows/page | store p50 ms | store p99 ms | store max ms | per-round p50 | REST p50 ms | REST p99 ms | REST max ms | baseline p50 ms | baseline p99 ms | p99 ≤ 20 ms (REST) |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	var worstStore, worstREST time.Duration
	var allBase []time.Duration
	for i, f := range filters {
		res := results[i]
		s, r, b := benchstack.Summarize(res.lat[0]), benchstack.Summarize(res.lat[1]), benchstack.Summarize(res.base)
		allBase = append(allBase, res.base...)
		worstStore, worstREST = max(worstStore, s.P99), max(worstREST, r.P99)
		var p50s []time.Duration
		for _, pr := range res.perRound[0] {
			p50s = append(p50s, benchstack.Summarize(pr).P50)
		}
		lo, hi := benchstack.MinMax(p50s)
		fmt.Fprintf(out, "| %s | %.1f | %s | %s | %s | %s–%s | %s | %s | %s | %s | %s | %s |\n", f.name,
			float64(res.rows)/float64(max(res.n, 1)), benchstack.Ms(s.P50), benchstack.Ms(s.P99), benchstack.Ms(s.Max),
			benchstack.Ms(lo), benchstack.Ms(hi), benchstack.Ms(r.P50), benchstack.Ms(r.P99), benchstack.Ms(r.Max),
			benchstack.Ms(b.P50), benchstack.Ms(b.P99), benchstack.Verdict(r.P99 <= targetP99))
	}
	b := benchstack.Summarize(allBase)
	fmt.Fprintf(out, "\n| figure | measured | target |\n|---|---|---|\n")
	fmt.Fprintf(out, "| worst p99 over the filters, store | %s ms | ≤ 20 ms — %s |\n", benchstack.Ms(worstStore), benchstack.Verdict(worstStore <= targetP99))
	fmt.Fprintf(out, "| worst p99 over the filters, REST | %s ms | ≤ 20 ms — %s |\n", benchstack.Ms(worstREST), benchstack.Verdict(worstREST <= targetP99))
	fmt.Fprintf(out, "| baseline: GetRun by primary key, all samples | p50 %s ms, p99 %s ms | — |\n", benchstack.Ms(b.P50), benchstack.Ms(b.P99))
	return nil
}

func withLimit(f catalog.RunFilter, n int) catalog.RunFilter { f.Limit = n; return f }

type runID struct{ project, id string }

func sampleIDs(ctx context.Context, conn *pgx.Conn, n int) ([]runID, error) {
	rows, err := conn.Query(ctx, `SELECT project, id FROM runs TABLESAMPLE SYSTEM (1) LIMIT $1`, n)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (runID, error) {
		var x runID
		return x, r.Scan(&x.project, &x.id)
	})
	if err == nil && len(out) == 0 {
		err = errors.New("no run sampled")
	}
	return out, err
}

func relationSizes(ctx context.Context, conn *pgx.Conn) (string, error) {
	var table, indexes, listing string
	err := conn.QueryRow(ctx, `SELECT pg_size_pretty(pg_table_size('runs')), pg_size_pretty(pg_indexes_size('runs')),
		pg_size_pretty(sum(pg_relation_size(indexrelid))) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'runs'::regclass AND c.relname LIKE 'runs\_project\_%created\_idx'`).Scan(&table, &indexes, &listing)
	return fmt.Sprintf("runs table %s (with TOAST), its indexes %s, of which the 8 listing indexes %s", table, indexes, listing), err
}

// restList serves GET /v1/projects/{p}/runs through the handler.
func restList(ctx context.Context, h http.Handler, secret string, f catalog.RunFilter) (int, error) {
	q := url.Values{}
	if f.Pipeline != "" {
		q.Set("pipeline", f.Pipeline)
	}
	if f.State != "" {
		q.Set("state", string(f.State))
	}
	if f.CreatedBy != "" {
		q.Set("createdBy", f.CreatedBy)
	}
	if f.CreatedAfter != nil {
		q.Set("createdAfter", f.CreatedAfter.Format(time.RFC3339))
	}
	if f.CreatedBefore != nil {
		q.Set("createdBefore", f.CreatedBefore.Format(time.RFC3339))
	}
	if f.PageToken != "" {
		q.Set("pageToken", f.PageToken)
	}
	q.Set("pageSize", fmt.Sprint(f.Limit))
	req := httptest.NewRequestWithContext(ctx, "GET", "/v1/projects/"+f.Project+"/runs?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d %s", req.URL, rec.Code, rec.Body.String())
	}
	return strings.Count(rec.Body.String(), `"links"`), nil
}

// stubEngine: listing never calls Temporal except for the UI link.
type stubEngine struct{}

var _ api.Engine = stubEngine{}

var errNoEngine = errors.New("listruns: no Temporal in this benchmark")

func (stubEngine) StartRun(context.Context, runclient.StartRequest) error { return errNoEngine }
func (stubEngine) SignalCancel(context.Context, string, runstate.CancelRequest) error {
	return errNoEngine
}
func (stubEngine) DecideApproval(context.Context, string, runstate.ApprovalRequest) (runstate.Status, error) {
	return runstate.Status{}, errNoEngine
}
func (stubEngine) QueryStatus(context.Context, string) (runstate.Status, error) {
	return runstate.Status{}, errNoEngine
}
func (stubEngine) QueryAdmissionQueue(context.Context, string) (activities.AdmissionQueue, error) {
	return activities.AdmissionQueue{}, errNoEngine
}
func (stubEngine) StartInput(context.Context, string) (json.RawMessage, error) {
	return nil, errNoEngine
}
func (stubEngine) UIURL(id string) string {
	return "http://127.0.0.1:8233/namespaces/atelier/workflows/" + id
}
func (stubEngine) Health(context.Context) error { return nil }
