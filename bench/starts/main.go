// Command starts measures run starts through the REST gateway against raw
// Temporal SDK starts of the same workflow, from C concurrent clients, then
// checks that no run the gateway accepted was lost. See bench/doc.go.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atelier-ml/atelier/bench/internal/benchstack"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/workflows"
)

const (
	project      = "bench"
	pipelineName = "noop"
	noopYAML     = `steps:
  - name: noop
    container: {command: ["true"]}
`
)

// idleWindow is how long the stack's idle CPU is measured.
const idleWindow = 10 * time.Second

// Targets printed next to the figures (never asserted).
const (
	targetRateRatio = 0.95
	targetP99Ratio  = 1.5
)

func main() {
	n := flag.Int("n", 2000, "starts per mode per round")
	c := flag.Int("c", 32, "concurrent clients")
	rounds := flag.Int("rounds", 2, "rounds per mode, interleaved (baseline, subject, baseline, ...)")
	quick := flag.Bool("quick", false, "smoke run: -n 100 -c 8 unless given")
	verbose := flag.Bool("v", false, "stack logs at info level")
	pin := flag.Bool("pin", false, "pin the Temporal server to CPU 0 and this process (clients, gateway) and its Postgres backends to CPU 1, as if the engine ran on its own machine")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole process (gateway, clients, benchmark) to this file")
	flag.Parse()
	if *quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["n"] {
			*n = 100
		}
		if !set["c"] {
			*c = 8
		}
	}
	if *n < 1 || *c < 1 || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "starts: -n, -c and -rounds must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "starts:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, *n, *c, *rounds, *verbose, *pin); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "starts:", err)
		os.Exit(1)
	}
}

// starter performs start number i of a round; it returns the run ID when
// the start was accepted, or an error.
type starter func(ctx context.Context, round, i int) (string, error)

type mode struct {
	name, what string
	start      starter
	rounds     []round
}

type round struct {
	wall      time.Duration
	lat       []time.Duration // of successful starts
	errors    map[string]int  // error → count
	accepted  []string        // run IDs
	firstErrs []string
	cpu       benchstack.CPU // spent during the round, by process
}

func run(ctx context.Context, n, conc, rounds int, verbose, pin bool) error {
	opts := benchstack.Options{Name: "starts", Gateway: true}
	if verbose {
		opts.LogLevel = "info"
	}
	st, err := benchstack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer st.Close()

	token, err := st.Bootstrap(ctx, project)
	if err != nil {
		return err
	}
	hc := &http.Client{
		Timeout: time.Minute,
		Transport: &http.Transport{
			MaxIdleConns:        2 * conc,
			MaxIdleConnsPerHost: 2 * conc,
			IdleConnTimeout:     5 * time.Minute,
		},
	}
	defer hc.CloseIdleConnections()
	if code, body, err := do(ctx, hc, "POST", st.URL+"/v1/projects/"+project+"/pipelines/"+pipelineName+"/versions",
		token, "application/yaml", []byte(noopYAML)); err != nil || (code != 200 && code != 201) {
		return fmt.Errorf("create pipeline %s: %d %s %v", pipelineName, code, body, err)
	}
	// The raw start gets exactly the input the gateway would build.
	pv, err := st.Store.GetPipelineVersion(ctx, project, pipelineName, 0)
	if err != nil {
		return err
	}
	var p pipeline.Spec
	if err := json.Unmarshal(pv.Spec, &p); err != nil {
		return err
	}
	params, err := pipeline.ResolveParams(&p, map[string]any{})
	if err != nil {
		return err
	}

	restBody := []byte(`{"pipeline":"` + pipelineName + `","params":{}}`)
	rest := func(ctx context.Context, _, _ int) (string, error) {
		code, body, err := do(ctx, hc, "POST", st.URL+"/v1/projects/"+project+"/runs", token, "application/json", restBody)
		if err != nil {
			return "", err
		}
		if code != http.StatusCreated {
			return "", fmt.Errorf("HTTP %d: %s", code, firstLine(body))
		}
		var out struct {
			ID string `json:"id"`
		}
		if err := json.Unmarshal(body, &out); err != nil || out.ID == "" {
			return "", fmt.Errorf("201 without a run id: %s", firstLine(body))
		}
		return out.ID, nil
	}
	// The baseline starts through runclient, the gateway's own start code,
	// so that Temporal is asked to do exactly the same work (search
	// attributes, among them the created-by one, and memo cost visibility
	// writes), and the difference is only what the gateway does around the
	// start (HTTP, auth, validation, catalogue insert).
	engine := runclient.New(st.Client, runclient.Config{})
	prefix := fmt.Sprintf("raw-%x", time.Now().UnixNano())
	raw := func(ctx context.Context, r, i int) (string, error) {
		id := fmt.Sprintf("%s-%d-%d", prefix, r, i)
		in, err := json.Marshal(workflows.PipelineInput{RunID: id, Project: project, Pipeline: pipelineName, Version: pv.Version, Spec: p, Params: params})
		if err != nil {
			return "", err
		}
		return id, engine.StartRun(ctx, runclient.StartRequest{
			RunID: id, Workflow: runstate.PipelineWorkflowName, TaskQueue: st.Cfg.TaskQueue,
			Input: json.RawMessage(in), Project: project, Pipeline: pipelineName, CreatedBy: benchstack.TokenName,
		})
	}
	modes := []*mode{
		{name: "baseline", what: "runclient.StartRun → client.ExecuteWorkflow(" + runstate.PipelineWorkflowName + ")", start: raw},
		{name: "subject", what: "POST /v1/projects/" + project + "/runs", start: rest},
	}

	// Warm-up (not reported): connections, pools, caches, JIT-free but not
	// cold. The subject's warm-up runs are checked for loss like the rest.
	warm := min(n, 4*conc)
	var warmAccepted []string
	for _, m := range modes {
		r := measure(ctx, m.start, -1, warm, conc)
		benchstack.Logf("%-8s warm-up %d starts, %d errors", m.name, warm, sum(r.errors))
		if m.name == "subject" {
			warmAccepted = r.accepted
		}
	}
	// What the stack burns with nothing to do (the gateway's background
	// loops, the dev server's own timers and pollers): charged per second,
	// not per start, so it is taken out of each round's CPU below. Else
	// the slower mode would look dearer per start by that background alone.
	idle0 := st.CPU(ctx)
	time.Sleep(idleWindow)
	idle := st.CPU(ctx).Sub(idle0)
	for rd := 0; rd < rounds; rd++ {
		for _, m := range modes {
			if pin {
				// Again before each round: the pools may have opened
				// Postgres connections since.
				if err := st.PinSplit(ctx); err != nil {
					return err
				}
			}
			before := st.CPU(ctx)
			r := measure(ctx, m.start, rd, n, conc)
			r.cpu = st.CPU(ctx).Sub(before)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.rounds = append(m.rounds, r)
			benchstack.Logf("%-8s round %d/%d: %.0f starts/s, p50 %s ms, p99 %s ms, %d errors", m.name, rd+1, rounds,
				float64(len(r.lat))/r.wall.Seconds(), benchstack.Ms(benchstack.Summarize(r.lat).P50),
				benchstack.Ms(benchstack.Summarize(r.lat).P99), sum(r.errors))
		}
	}

	accepted := slices.Clone(warmAccepted)
	for _, r := range modes[1].rounds {
		accepted = append(accepted, r.accepted...)
	}
	v := verify(ctx, st, accepted, conc)
	report(st, modes, n, conc, rounds, warm, pin, idle, v)
	return nil
}

// measure runs n starts from conc goroutines pulling from a shared counter.
func measure(ctx context.Context, start starter, rd, n, conc int) round {
	var next atomic.Int64
	var mu sync.Mutex
	r := round{errors: map[string]int{}}
	var wg sync.WaitGroup
	t0 := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			var ids []string
			errs := map[string]int{}
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					break
				}
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				s := time.Now()
				id, err := start(sctx, rd, i)
				d := time.Since(s)
				cancel()
				if err != nil {
					errs[errKey(err)]++
					continue
				}
				lat = append(lat, d)
				ids = append(ids, id)
			}
			mu.Lock()
			r.lat = append(r.lat, lat...)
			r.accepted = append(r.accepted, ids...)
			for k, v := range errs {
				r.errors[k] += v
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	r.wall = time.Since(t0)
	return r
}

func errKey(err error) string {
	s := err.Error()
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}

func sum(m map[string]int) int {
	t := 0
	for _, v := range m {
		t += v
	}
	return t
}

func do(ctx context.Context, hc *http.Client, method, url, token, ctype string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// --- zero lost ---

type verification struct {
	accepted, inPostgres, inTemporal, missing int
	examples                                  []string
}

// verify checks every run the gateway accepted (201): its row exists in
// Postgres and its workflow execution in Temporal.
func verify(ctx context.Context, st *benchstack.Stack, ids []string, conc int) verification {
	v := verification{accepted: len(ids)}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				id := ids[i]
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, pgErr := st.Store.GetRun(cctx, project, id)
				_, tErr := st.Client.DescribeWorkflowExecution(cctx, id, "")
				cancel()
				mu.Lock()
				if pgErr == nil {
					v.inPostgres++
				}
				if tErr == nil {
					v.inTemporal++
				}
				if pgErr != nil || tErr != nil {
					v.missing++
					if len(v.examples) < 5 {
						v.examples = append(v.examples, fmt.Sprintf("%s: postgres %v; temporal %v", id, pgErr, tErr))
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return v
}

// --- report ---

func report(st *benchstack.Stack, modes []*mode, n, conc, rounds, warm int, pin bool, idle benchstack.CPU, v verification) {
	out := os.Stdout
	fmt.Fprintf(out, "## bench/starts: run starts through REST vs raw SDK\n\n")
	st.Info.Print(out)
	fmt.Fprintf(out, "C=%d concurrent clients; N=%d starts per round; %d rounds per mode, interleaved (baseline, subject, ...), after a warm-up of %d starts per mode (not reported). No worker polls the task queue (starts only; see bench/doc.go). The raw start goes through the gateway's own start code (runclient.StartRun: the same search attributes, memo and ID policies).\n\n",
		conc, n, rounds, warm)
	if pin {
		fmt.Fprintf(out, "Pinned (-pin): the Temporal server on CPU 0; this process (clients, gateway) and the benchmark database's Postgres backends on CPU 1 (GOMAXPROCS=1): the engine does not share its processor with what runs in front of it.\n\n")
	}
	fmt.Fprintf(out, "| mode | what | starts | errors | starts/s | per-round starts/s | p50 ms | p99 ms | max ms |\n")
	fmt.Fprintf(out, "|---|---|---|---|---|---|---|---|---|\n")
	type agg struct {
		rate float64
		s    benchstack.Summary
	}
	aggs := make([]agg, len(modes))
	var errLines []string
	for k, m := range modes {
		var lat []time.Duration
		var wall time.Duration
		var rates []string
		nerr := 0
		errs := map[string]int{}
		for _, r := range m.rounds {
			lat = append(lat, r.lat...)
			wall += r.wall
			rates = append(rates, fmt.Sprintf("%.0f", float64(len(r.lat))/r.wall.Seconds()))
			nerr += sum(r.errors)
			for e, c := range r.errors {
				errs[e] += c
			}
		}
		s := benchstack.Summarize(lat)
		aggs[k] = agg{float64(len(lat)) / wall.Seconds(), s}
		fmt.Fprintf(out, "| %s | `%s` | %d | %d | %.0f | %s | %s | %s | %s |\n", m.name, m.what, len(lat), nerr,
			aggs[k].rate, strings.Join(rates, ", "), benchstack.Ms(s.P50), benchstack.Ms(s.P99), benchstack.Ms(s.Max))
		for _, e := range slices.Sorted(maps.Keys(errs)) {
			errLines = append(errLines, fmt.Sprintf("- %s: %d× %s", m.name, errs[e], e))
		}
	}
	if len(errLines) > 0 {
		fmt.Fprintf(out, "\nErrors:\n%s\n", strings.Join(errLines, "\n"))
	}
	base, subj := aggs[0], aggs[1]
	fmt.Fprintf(out, "\n| figure | measured | target | |\n|---|---|---|---|\n")
	fmt.Fprintf(out, "| subject/baseline starts/s | %s | ≥ %.2f× | %s |\n", benchstack.Ratio(subj.rate, base.rate), targetRateRatio,
		benchstack.Verdict(subj.rate >= targetRateRatio*base.rate))
	fmt.Fprintf(out, "| subject/baseline p99 | %s | ≤ %.1f× | %s |\n", benchstack.Ratio(float64(subj.s.P99), float64(base.s.P99)), targetP99Ratio,
		benchstack.Verdict(float64(subj.s.P99) <= targetP99Ratio*float64(base.s.P99)))
	fmt.Fprintf(out, "| subject/baseline p50 | %s | | |\n", benchstack.Ratio(float64(subj.s.P50), float64(base.s.P50)))

	// CPU per start does not move with the machine's other load as rates
	// do; on a CPU-bound machine the rate ratio tends to the inverse of
	// the total CPU ratio.
	perSec := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / idleWindow.Seconds() }
	fmt.Fprintf(out, "\nCPU per accepted start, ms (user + system, from /proc; Postgres = the benchmark database's backends), net of the idle CPU measured for %s before the rounds (ms/s: bench process %.1f, Temporal %.1f, Postgres %.1f) times the round's length:\n\n",
		idleWindow, perSec(idle.Bench), perSec(idle.Temporal), perSec(idle.Postgres))
	fmt.Fprintf(out, "| mode | bench process (clients, gateway) | Temporal server | Postgres | total |\n|---|---|---|---|---|\n")
	totals := make([]float64, len(modes))
	for k, m := range modes {
		var c benchstack.CPU
		started := 0
		for _, r := range m.rounds {
			f := float64(r.wall) / float64(idleWindow)
			c.Bench += r.cpu.Bench - time.Duration(f*float64(idle.Bench))
			c.Temporal += r.cpu.Temporal - time.Duration(f*float64(idle.Temporal))
			c.Postgres += r.cpu.Postgres - time.Duration(f*float64(idle.Postgres))
			started += len(r.lat)
		}
		per := func(d time.Duration) float64 {
			return float64(d) / float64(time.Millisecond) / float64(max(started, 1))
		}
		totals[k] = per(c.Total())
		fmt.Fprintf(out, "| %s | %.3f | %.3f | %.3f | %.3f |\n", m.name, per(c.Bench), per(c.Temporal), per(c.Postgres), totals[k])
	}
	fmt.Fprintf(out, "\nbaseline/subject CPU per start: %s (the rate ratio a CPU-bound machine tends to)\n", benchstack.Ratio(totals[0], totals[1]))

	fmt.Fprintf(out, "\nZero lost (every run the gateway answered 201, warm-up included):\n\n")
	fmt.Fprintf(out, "| accepted | in Postgres | in Temporal | missing | |\n|---|---|---|---|---|\n")
	fmt.Fprintf(out, "| %d | %d | %d | %d | %s |\n", v.accepted, v.inPostgres, v.inTemporal, v.missing,
		map[bool]string{true: "zero lost", false: "LOST RUNS"}[v.missing == 0])
	for _, e := range v.examples {
		fmt.Fprintf(out, "- %s\n", e)
	}
	fmt.Fprintln(out)
}
