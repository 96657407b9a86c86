package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

func schedulesCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "schedules", Aliases: []string{"schedule", "sched"}, Short: "Create, show and steer schedules of pipeline runs", GroupID: GroupID}
	var (
		c          gen.ScheduleCreate
		workflow   string
		input      string
		cron       []string
		every      []string
		params     []string
		paramsFile string
		overlap    string
		timeZone   string
		jitter     string
		version    int
		paused     bool
		note       string
	)
	create := &cobra.Command{
		Use:   "create NAME (--pipeline P | --workflow W) (--cron EXPR | --every DURATION)...",
		Short: "Create a schedule of a pipeline version or of a Go pipeline",
		Example: `  atelier schedules create nightly --pipeline train --cron "0 2 * * *" --time-zone Europe/Paris -p dataset=iris
  atelier schedules create often --pipeline quick --every 15m --overlap skip
  atelier schedules create hourly-etl --workflow example.TrainEvaluate --input '{"dataset":"iris","learningRates":[0.1]}' --every 1h`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, err := parseParams(params, paramsFile)
			if err != nil {
				return err
			}
			c.Name = args[0]
			if input != "" {
				if !json.Valid([]byte(input)) {
					return fmt.Errorf("--input is not valid JSON")
				}
				raw := json.RawMessage(input)
				c.Input = &raw
			}
			set := func(v string, p **string) {
				if v != "" {
					*p = &v
				}
			}
			if len(cron) > 0 {
				c.Cron = &cron
			}
			if len(every) > 0 {
				c.Every = &every
			}
			if len(ps) > 0 {
				c.Params = &ps
			}
			if version > 0 {
				c.Version = &version
			}
			if overlap != "" {
				ov := gen.ScheduleOverlap(overlap)
				c.Overlap = &ov
			}
			set(workflow, &c.Workflow)
			set(timeZone, &c.TimeZone)
			set(jitter, &c.Jitter)
			set(note, &c.Note)
			if paused {
				c.Paused = &paused
			}
			return o.scheduleCall(cmd, func(ctx context.Context, s *session) (*http.Response, []byte, *gen.Schedule, error) {
				res, err := s.c.CreateScheduleWithResponse(ctx, s.Project, c)
				if err != nil {
					return nil, nil, nil, err
				}
				return res.HTTPResponse, res.Body, res.JSON201, nil
			}, http.StatusCreated)
		},
	}
	f := create.Flags()
	f.StringVar(&c.Pipeline, "pipeline", "", "declarative pipeline to run")
	f.StringVar(&workflow, "workflow", "", "native Go pipeline to run, by its registered name")
	f.StringVar(&input, "input", "", "the Go pipeline's input, as JSON (with --workflow)")
	f.IntVar(&version, "version", 0, "pipeline version (default: the newest now)")
	f.StringArrayVar(&cron, "cron", nil, "cron expression (repeatable)")
	f.StringArrayVar(&every, "every", nil, "interval such as 15m (repeatable)")
	f.StringArrayVarP(&params, "param", "p", nil, "parameter name=value (repeatable)")
	f.StringVar(&paramsFile, "params-file", "", "YAML or JSON file of parameters (-p wins)")
	f.StringVar(&overlap, "overlap", "", "skip (default), bufferOne, bufferAll, cancelOther, terminateOther, allowAll")
	f.StringVar(&timeZone, "time-zone", "", "IANA time zone of the cron expressions (default UTC)")
	f.StringVar(&jitter, "jitter", "", "random delay up to this duration")
	f.BoolVar(&paused, "paused", false, "create it paused")
	f.StringVar(&note, "note", "", "a note shown with the schedule")
	create.MarkFlagsOneRequired("pipeline", "workflow")
	create.MarkFlagsMutuallyExclusive("pipeline", "workflow")

	list := &cobra.Command{
		Use: "list", Short: "List the project's schedules", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListSchedulesWithResponse(cmd.Context(), s.Project)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table { return schedulesTable(o, res.JSON200.Items...) })
		},
	}
	get := &cobra.Command{
		Use: "get NAME", Short: "Show a schedule, its next and recent runs", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.scheduleCall(cmd, func(ctx context.Context, s *session) (*http.Response, []byte, *gen.Schedule, error) {
				res, err := s.c.GetScheduleWithResponse(ctx, s.Project, args[0])
				if err != nil {
					return nil, nil, nil, err
				}
				return res.HTTPResponse, res.Body, res.JSON200, nil
			}, http.StatusOK)
		},
	}
	pauseCmd := func(pause bool) *cobra.Command {
		var why string
		use, short := "pause NAME", "Pause a schedule"
		if !pause {
			use, short = "unpause NAME", "Unpause a schedule"
		}
		cmd := &cobra.Command{
			Use: use, Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				body := gen.ScheduleNote{}
				if why != "" {
					body.Note = &why
				}
				return o.scheduleCall(cmd, func(ctx context.Context, s *session) (*http.Response, []byte, *gen.Schedule, error) {
					if pause {
						res, err := s.c.PauseScheduleWithResponse(ctx, s.Project, args[0], body)
						if err != nil {
							return nil, nil, nil, err
						}
						return res.HTTPResponse, res.Body, res.JSON200, nil
					}
					res, err := s.c.UnpauseScheduleWithResponse(ctx, s.Project, args[0], body)
					if err != nil {
						return nil, nil, nil, err
					}
					return res.HTTPResponse, res.Body, res.JSON200, nil
				}, http.StatusOK)
			},
		}
		cmd.Flags().StringVar(&why, "note", "", "why")
		return cmd
	}
	trigger := &cobra.Command{
		Use: "trigger NAME", Short: "Start a run of the schedule now", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.scheduleCall(cmd, func(ctx context.Context, s *session) (*http.Response, []byte, *gen.Schedule, error) {
				res, err := s.c.TriggerScheduleWithResponse(ctx, s.Project, args[0])
				if err != nil {
					return nil, nil, nil, err
				}
				return res.HTTPResponse, res.Body, res.JSON200, nil
			}, http.StatusOK)
		},
	}
	var from, to string
	backfill := &cobra.Command{
		Use: "backfill NAME --from TIME --to TIME", Short: "Start every run the schedule would have started in [from, to)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			start, err := time.Parse(time.RFC3339, from)
			if err != nil {
				return fmt.Errorf("--from: want RFC 3339, e.g. 2026-11-01T00:00:00Z: %w", err)
			}
			end, err := time.Parse(time.RFC3339, to)
			if err != nil {
				return fmt.Errorf("--to: want RFC 3339: %w", err)
			}
			return o.scheduleCall(cmd, func(ctx context.Context, s *session) (*http.Response, []byte, *gen.Schedule, error) {
				res, err := s.c.BackfillScheduleWithResponse(ctx, s.Project, args[0], gen.ScheduleBackfillRequest{Start: start, End: end})
				if err != nil {
					return nil, nil, nil, err
				}
				return res.HTTPResponse, res.Body, res.JSON200, nil
			}, http.StatusOK)
		},
	}
	backfill.Flags().StringVar(&from, "from", "", "start (RFC 3339)")
	backfill.Flags().StringVar(&to, "to", "", "end, excluded (RFC 3339)")
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a schedule (its runs stay)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.DeleteScheduleWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusNoContent); err != nil {
				return err
			}
			fmt.Fprintf(o.stderr, "schedule %s deleted\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, get, pauseCmd(true), pauseCmd(false), trigger, backfill, del)
	return cmd
}

// scheduleCall runs one call answering a schedule and prints it.
func (o *options) scheduleCall(cmd *cobra.Command, call func(context.Context, *session) (*http.Response, []byte, *gen.Schedule, error), want int) error {
	s, err := o.session()
	if err != nil {
		return err
	}
	hr, raw, sc, err := call(cmd.Context(), s)
	if err != nil {
		return unreachable(err)
	}
	if err := expect(hr, raw, want); err != nil {
		return err
	}
	return o.print(o.stdout, sc, func() table { return schedulesTable(o, *sc) })
}

func schedulesTable(o *options, items ...gen.Schedule) table {
	t := table{{"NAME", "PIPELINE", "VERSION", "WHEN", "OVERLAP", "PAUSED", "RUNS", "NEXT"}}
	for _, sc := range items {
		when := append(append([]string{}, deref(sc.Cron)...), prefixed("every ", deref(sc.Every))...)
		next := "-"
		if len(sc.NextRuns) > 0 {
			next = sc.NextRuns[0].Local().Format(time.RFC3339)
		}
		version := "-"
		if sc.Version > 0 {
			version = strconv.Itoa(sc.Version)
		}
		t = append(t, []string{sc.Name, first(sc.Pipeline, str(sc.Workflow)), version, strings.Join(when, ", "), string(sc.Overlap),
			strconv.FormatBool(sc.Paused), strconv.Itoa(sc.Actions), next})
	}
	return t
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func prefixed(p string, vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = p + v
	}
	return out
}
