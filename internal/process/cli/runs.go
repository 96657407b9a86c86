package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/atelier-ml/atelier/api/gen"
)

func runCmd(o *options) *cobra.Command {
	var (
		params     []string
		paramsFile string
		version    int
		key        string
		watch      bool
		noCache    bool
		targets    []string
	)
	cmd := &cobra.Command{
		Use:   "run PIPELINE [-p name=value]... [--target STEP]... [--watch] [--no-cache]",
		Short: "Start a run of a pipeline (declarative or Go)",
		Long: `Run starts a run of the pipeline's latest version (or --version) with the
parameters given by -p (values are YAML scalars: -p lr=0.1 is a number,
-p tag=v1 a string) and --params-file. With --watch it follows the run
until it ends and exits non-zero when it does not succeed. --no-cache runs
every cached step instead of reusing an earlier result (the new results
replace the cache's entries). --target runs a subset of a declarative
pipeline: the named steps and what they need; the others are skipped.`,
		Example: `  atelier run train -p epochs=3 -p lr=0.01 --watch
  atelier run train --params-file params.yaml -o json
  atelier run train --target evaluate --watch`,
		Args:    cobra.ExactArgs(1),
		GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, err := parseParams(params, paramsFile)
			if err != nil {
				return err
			}
			s, err := o.session()
			if err != nil {
				return err
			}
			body := gen.CreateRunRequest{Pipeline: &args[0]}
			if len(ps) > 0 {
				body.Params = &ps
			}
			if version > 0 {
				body.Version = &version
			}
			if noCache {
				body.Cache = &gen.RunCacheOptions{Bypass: &noCache}
			}
			if len(targets) > 0 {
				body.Targets = &targets
			}
			var hp gen.CreateRunParams
			if key != "" {
				hp.IdempotencyKey = &key
			}
			res, err := s.c.CreateRunWithResponse(cmd.Context(), s.Project, &hp, body)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200, 201); err != nil {
				return err
			}
			run := first2(res.JSON201, res.JSON200)
			if !watch {
				return o.print(o.stdout, run, func() table { return runsTable(o, []gen.Run{*run}) })
			}
			fmt.Fprintf(o.stderr, "run %s started\n", run.Id)
			return o.watch(cmd, s, run.Id)
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&params, "param", "p", nil, "parameter name=value (repeatable)")
	f.StringVar(&paramsFile, "params-file", "", "YAML or JSON file of parameters (-p wins)")
	f.StringArrayVar(&targets, "target", nil, "run only this step and what it needs (repeatable)")
	f.IntVar(&version, "version", 0, "pipeline version (default: the latest)")
	f.StringVar(&key, "idempotency-key", "", "starting again with the same key answers the same run")
	f.BoolVarP(&watch, "watch", "w", false, "follow the run until it ends")
	f.BoolVar(&noCache, "no-cache", false, "run cached steps instead of reusing earlier results (declarative pipelines)")
	return cmd
}

func first2[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

// parseParams reads --params-file, then -p name=value on top.
func parseParams(kvs []string, file string) (map[string]any, error) {
	out := map[string]any{}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(b, &out); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
	}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-p %q: want name=value", kv)
		}
		var val any
		if err := yaml.Unmarshal([]byte(v), &val); err != nil || val == nil {
			val = v // not a YAML scalar (or empty): the text as written
		}
		if _, isMap := val.(map[string]any); isMap {
			val = v
		}
		out[k] = val
	}
	return out, nil
}

func runsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Aliases: []string{"r"}, Short: "List, show and follow runs", GroupID: GroupID}
	var (
		pipeline, state, schedule, createdBy string
		limit                                int
		metric                               string
		ascending                            bool
		metricMin, metricMax                 float64
	)
	list := &cobra.Command{
		Use:   "list",
		Short: "List the project's runs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			p := gen.ListRunsParams{PageSize: &limit}
			if pipeline != "" {
				p.Pipeline = &pipeline
			}
			if state != "" {
				st := gen.RunState(strings.ToUpper(state))
				p.State = &st
			}
			if schedule != "" {
				p.Schedule = &schedule
			}
			if createdBy != "" {
				p.CreatedBy = &createdBy
			}
			if metric != "" {
				p.Metric = &metric
				if ascending {
					asc := gen.Asc
					p.MetricOrder = &asc
				}
			}
			if cmd.Flags().Changed("min") {
				p.MetricMin = &metricMin
			}
			if cmd.Flags().Changed("max") {
				p.MetricMax = &metricMax
			}
			res, err := s.c.ListRunsWithResponse(cmd.Context(), s.Project, &p)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table { return runsTable(o, res.JSON200.Runs) })
		},
	}
	list.Flags().StringVar(&pipeline, "pipeline", "", "only runs of this pipeline")
	list.Flags().StringVar(&state, "state", "", "only runs in this state (RUNNING, FAILED, ...)")
	list.Flags().StringVar(&schedule, "schedule", "", "only runs started by this schedule")
	list.Flags().StringVar(&createdBy, "created-by", "", "only runs started with the token of this name")
	list.Flags().IntVar(&limit, "limit", 50, "at most this many runs")
	list.Flags().StringVar(&metric, "metric", "", "STEP.METRIC: the pipeline's runs that reported it, highest first (with --pipeline)")
	list.Flags().BoolVar(&ascending, "asc", false, "with --metric: lowest first")
	list.Flags().Float64Var(&metricMin, "min", 0, "with --metric: only runs whose value is at least this")
	list.Flags().Float64Var(&metricMax, "max", 0, "with --metric: only runs whose value is at most this")

	get := &cobra.Command{
		Use:   "get RUN",
		Short: "Show a run and its steps",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			run, err := getRun(cmd, s, args[0])
			if err != nil {
				return err
			}
			return o.print(o.stdout, run, func() table { return stepsTable(o, run.Status) })
		},
	}
	watch := &cobra.Command{
		Use:   "watch RUN",
		Short: "Follow a run until it ends (exit status: see `atelier --help`)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			return o.watch(cmd, s, args[0])
		},
	}
	var all bool
	compare := &cobra.Command{
		Use:   "compare RUN RUN...",
		Short: "Show 2 to 20 runs side by side: parameters, step outputs and metrics",
		Long: `Show runs side by side: their parameters, their steps' outputs and the
metrics their steps wrote to $ATELIER_METRICS. A '*' marks rows whose values
differ between the runs; for a metric, '^' marks the highest value and 'v'
the lowest. Only rows that differ are shown unless --all; -o json prints
every row.`,
		Args: cobra.RangeArgs(2, 20),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.CompareRunsWithResponse(cmd.Context(), s.Project, &gen.CompareRunsParams{Runs: args})
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table { return compareTable(res.JSON200, all) })
		},
	}
	compare.Flags().BoolVar(&all, "all", false, "also show rows whose values are equal in every run")
	cmd.AddCommand(list, get, watch, compare)
	return cmd
}

// compareTable is a comparison as rows: a header with each run's short ID
// and pipeline version, then parameters, outputs, metrics and series.
func compareTable(c *gen.RunComparison, all bool) table {
	head := []string{"", "NAME"}
	for _, r := range c.Runs {
		col := r.Id
		if r.Pipeline != nil && r.Version != nil {
			col += fmt.Sprintf(" (v%d)", *r.Version)
		}
		head = append(head, col)
	}
	t := table{append(head, "")}
	states := []string{"", "state"}
	for _, r := range c.Runs {
		states = append(states, string(r.State))
	}
	t = append(t, append(states, ""))
	mark := func(differs bool) string {
		if differs {
			return "*"
		}
		return ""
	}
	for _, p := range c.Params {
		if !all && !p.Differs {
			continue
		}
		t = append(t, append(append([]string{"param", p.Name}, jsonCells(p.Values)...), mark(p.Differs)))
	}
	for _, v := range c.Outputs {
		if !all && !v.Differs {
			continue
		}
		t = append(t, append(append([]string{"output", str(v.Step) + "." + v.Name}, jsonCells(v.Values)...), mark(v.Differs)))
	}
	for _, m := range c.Metrics {
		if !all && !m.Differs {
			continue
		}
		row := []string{"metric", m.Step + "." + m.Name}
		for i, v := range m.Values {
			cell := "-"
			if v != nil {
				cell = strconv.FormatFloat(*v, 'g', 6, 64)
			}
			switch {
			case m.Best != nil && *m.Best == i:
				cell += " ^"
			case m.Worst != nil && *m.Worst == i:
				cell += " v"
			}
			row = append(row, cell)
		}
		t = append(t, append(row, mark(m.Differs)))
	}
	for _, sr := range c.Series {
		row := []string{"series", sr.Step + "." + sr.Name}
		for _, v := range sr.Values {
			cell := "-"
			if len(v) > 0 {
				cell = fmt.Sprintf("%d points, last %s", len(v), strconv.FormatFloat(v[len(v)-1], 'g', 6, 64))
			}
			row = append(row, cell)
		}
		t = append(t, append(row, ""))
	}
	return t
}

// jsonCells prints JSON values for a table ("-": none).
func jsonCells(vals []any) []string {
	out := make([]string, len(vals))
	for i, v := range vals {
		if v == nil {
			out[i] = "-"
			continue
		}
		if s, ok := v.(string); ok {
			out[i] = s
			continue
		}
		b, _ := json.Marshal(v)
		out[i] = string(b)
	}
	return out
}

func getRun(cmd *cobra.Command, s *session, id string) (*gen.Run, error) {
	res, err := s.c.GetRunWithResponse(cmd.Context(), s.Project, id)
	if err != nil {
		return nil, unreachable(err)
	}
	if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
		return nil, err
	}
	return res.JSON200, nil
}

func runsTable(o *options, runs []gen.Run) table {
	t := table{{"RUN", "PIPELINE", "VERSION", "STATE", "CREATED", "BY"}}
	byMetric := len(runs) > 0 && runs[0].MetricValue != nil
	if byMetric {
		t[0] = append(t[0], "METRIC")
	}
	for _, r := range runs {
		name, ver := first(str(r.Pipeline), r.Workflow), "-"
		if r.Version != nil {
			ver = strconv.Itoa(*r.Version)
		}
		row := []string{r.Id, name, ver, string(r.State), ago(r.CreatedAt, o.now()), str(r.CreatedBy)}
		if byMetric {
			row = append(row, strconv.FormatFloat(deref(r.MetricValue), 'g', -1, 64))
		}
		t = append(t, row)
	}
	return t
}

func stepsTable(o *options, st *gen.RunStatus) table {
	t := table{{"STEP", "KIND", "STATE", "ATTEMPT", "DURATION", "PROGRESS", "MESSAGE"}}
	if st == nil {
		return t
	}
	for _, s := range st.Steps {
		t = append(t, stepRow(o, s))
	}
	return t
}

func stepRow(o *options, s gen.StepStatus) []string {
	attempt := "-"
	if s.Attempts != nil && len(*s.Attempts) > 0 {
		attempt = strconv.Itoa((*s.Attempts)[len(*s.Attempts)-1].Number)
	}
	progress := "-"
	if s.Items != nil && len(*s.Items) > 0 {
		done := 0
		for _, it := range *s.Items {
			if it.State == gen.StepStateSUCCEEDED || it.State == gen.StepStateCACHED {
				done++
			}
		}
		progress = fmt.Sprintf("%d/%d", done, len(*s.Items))
	}
	if w := s.Wide; w != nil {
		progress = fmt.Sprintf("%d/%d", w.Counts.Succeeded+w.Counts.Cached, w.Items)
		if w.Counts.Failed > 0 {
			progress += fmt.Sprintf(" (%d failed)", w.Counts.Failed)
		}
	}
	msg := first(str(s.Error), str(s.Message))
	if len(msg) > 80 {
		msg = msg[:77] + "..."
	}
	kind := s.Kind
	if s.OnExit != nil && *s.OnExit {
		kind += " (on exit)" // an exit handler: runs once the others have ended
	}
	return []string{s.Name, kind, string(s.State), attempt, span(s.StartedAt, s.FinishedAt, o.now()), progress, strings.ReplaceAll(msg, "\n", " ")}
}

func cancelCmd(o *options) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:     "cancel RUN",
		Short:   "Cancel a run: running steps are stopped and their objects cleaned up",
		Args:    cobra.ExactArgs(1),
		GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			body := gen.CancelRunRequest{}
			if reason != "" {
				body.Reason = &reason
			}
			res, err := s.c.CancelRunWithResponse(cmd.Context(), s.Project, args[0], body)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 202); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON202, func() table { return runsTable(o, []gen.Run{*res.JSON202}) })
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the run)")
	return cmd
}

func logsCmd(o *options) *cobra.Command {
	var (
		follow        bool
		item, attempt int
	)
	cmd := &cobra.Command{
		Use:   "logs RUN [STEP]",
		Short: "Print a step's log (every step's without STEP); -f follows it",
		Example: `  atelier logs 0b5c9e2a-... train -f
  atelier logs 0b5c9e2a-... score --item 3 --attempt 2`,
		Args:    cobra.RangeArgs(1, 2),
		GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			p := gen.GetStepLogsParams{}
			if follow {
				p.Follow = &follow
			}
			if cmd.Flags().Changed("item") {
				p.Item = &item
			}
			if attempt > 0 {
				p.Attempt = &attempt
			}
			if len(args) == 2 {
				return s.copyLog(cmd, o.stdout, args[0], args[1], &p)
			}
			if follow {
				return fmt.Errorf("name the step to follow")
			}
			run, err := getRun(cmd, s, args[0])
			if err != nil {
				return err
			}
			for _, st := range run.Status.Steps {
				if st.Attempts == nil || len(*st.Attempts) == 0 {
					continue // never started: no log
				}
				fmt.Fprintf(o.stdout, "==> %s <==\n", st.Name)
				if err := s.copyLog(cmd, o.stdout, args[0], st.Name, &p); err != nil {
					fmt.Fprintf(o.stderr, "%s: %v\n", st.Name, err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing as the step writes, until it ends")
	cmd.Flags().IntVar(&item, "item", 0, "forEach item index")
	cmd.Flags().IntVar(&attempt, "attempt", 0, "attempt number (default: the latest)")
	return cmd
}

// copyLog streams a step's log (followed when p.Follow) to w.
func (s *session) copyLog(cmd *cobra.Command, w io.Writer, run, step string, p *gen.GetStepLogsParams) error {
	res, err := s.c.GetStepLogs(cmd.Context(), s.Project, run, step, p)
	if err != nil {
		return unreachable(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(res.Body, 1<<16))
		return expect(res, body, http.StatusOK)
	}
	_, err = io.Copy(w, res.Body)
	return err
}

func retryCmd(o *options) *cobra.Command {
	var (
		resumeFrom []string
		watch      bool
	)
	cmd := &cobra.Command{
		Use:   "retry RUN [--resume-from STEP]... [--watch]",
		Short: "Start a new run that reuses what succeeded in a finished run and runs the rest",
		Long: `Retry starts a run of the same pipeline version and parameters. Every step
(and forEach item) that succeeded in RUN is reused, shown as CACHED, and
does not run again; the rest runs. --resume-from also reruns the named
steps and everything downstream of them.`,
		Args:    cobra.ExactArgs(1),
		GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			body := gen.RetryRunRequest{}
			if len(resumeFrom) > 0 {
				body.ResumeFrom = &resumeFrom
			}
			res, err := s.c.RetryRunWithResponse(cmd.Context(), s.Project, args[0], body)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 201); err != nil {
				return err
			}
			if !watch {
				return o.print(o.stdout, res.JSON201, func() table { return runsTable(o, []gen.Run{*res.JSON201}) })
			}
			fmt.Fprintf(o.stderr, "run %s started (retry of %s)\n", res.JSON201.Id, args[0])
			return o.watch(cmd, s, res.JSON201.Id)
		},
	}
	cmd.Flags().StringArrayVar(&resumeFrom, "resume-from", nil, "step to run again with everything downstream (repeatable)")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "follow the new run until it ends")
	return cmd
}
