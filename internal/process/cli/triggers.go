package cli

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

func triggersCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "triggers", Aliases: []string{"trigger"}, Short: "Start pipelines when a run finishes or on a signed request", GroupID: GroupID}
	var (
		onRun      string
		states     []string
		hook       bool
		version    int
		params     []string
		paramsFile string
		perMinute  int
		disabled   bool
		desc       string
	)
	create := &cobra.Command{
		Use:   "create NAME --pipeline P (--on-run-finished UPSTREAM [--state S]... | --hook)",
		Short: "Create a trigger",
		Example: `  atelier triggers create retrain --pipeline train --on-run-finished prepare \
      -p 'dataset={{ upstream.steps.export.outputs.path }}' -p 'lr={{ upstream.params.lr }}'
  atelier triggers create on-upload --pipeline ingest --hook -p 'key={{ body.Records[0].s3.object.key }}'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, err := parseParams(params, paramsFile)
			if err != nil {
				return err
			}
			pipeline, _ := cmd.Flags().GetString("pipeline")
			c := gen.TriggerCreate{Name: args[0], Pipeline: pipeline, Params: &ps}
			switch {
			case hook && onRun != "":
				return fmt.Errorf("give one of --on-run-finished and --hook")
			case hook:
				c.On.Hook = &map[string]any{}
			case onRun != "":
				rf := gen.TriggerRunFinished{Pipeline: onRun}
				if len(states) > 0 {
					ss := make([]gen.RunState, len(states))
					for i, s := range states {
						ss[i] = gen.RunState(strings.ToUpper(s))
					}
					rf.States = &ss
				}
				c.On.RunFinished = &rf
			default:
				return fmt.Errorf("give --on-run-finished UPSTREAM or --hook")
			}
			if version > 0 {
				c.Version = &version
			}
			if perMinute > 0 {
				c.MaxPerMinute = &perMinute
			}
			if disabled {
				f := false
				c.Enabled = &f
			}
			if desc != "" {
				c.Description = &desc
			}
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.CreateTriggerWithResponse(cmd.Context(), s.Project, c)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusCreated); err != nil {
				return err
			}
			if sec := res.JSON201.Secret; sec != nil {
				fmt.Fprintf(o.stderr, "hook URL: %s%s\nsecret (shown once; sign each body: X-Atelier-Signature: sha256=<hex HMAC-SHA256>): %s\n",
					s.URL, deref(res.JSON201.Trigger.HookUrl), *sec)
			}
			return o.print(o.stdout, res.JSON201, func() table { return triggersTable(res.JSON201.Trigger) })
		},
	}
	f := create.Flags()
	f.String("pipeline", "", "the pipeline a firing starts")
	f.StringVar(&onRun, "on-run-finished", "", "fire when a run of this pipeline finishes")
	f.StringArrayVar(&states, "state", nil, "final state that fires it (repeatable; default SUCCEEDED)")
	f.BoolVar(&hook, "hook", false, "fire on a signed POST to the trigger's URL")
	f.IntVar(&version, "version", 0, "pin the started pipeline's version (default: the newest when it fires)")
	f.StringArrayVarP(&params, "param", "p", nil, "param name=value; values may hold {{ upstream.… }} or {{ body.… }} (repeatable)")
	f.StringVar(&paramsFile, "params-file", "", "YAML or JSON file of params (-p wins)")
	f.IntVar(&perMinute, "max-per-minute", 0, "runs started per minute at most (default 60)")
	f.BoolVar(&disabled, "disabled", false, "create it disabled")
	f.StringVar(&desc, "description", "", "a description")
	_ = create.MarkFlagRequired("pipeline")

	list := &cobra.Command{
		Use: "list", Short: "List the project's triggers", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListTriggersWithResponse(cmd.Context(), s.Project)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table { return triggersTable(res.JSON200.Items...) })
		},
	}
	get := &cobra.Command{
		Use: "get NAME", Short: "Show a trigger", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.triggerCall(cmd, func(ctx context.Context, s *session) (*http.Response, []byte, *gen.Trigger, error) {
				res, err := s.c.GetTriggerWithResponse(ctx, s.Project, args[0])
				if err != nil {
					return nil, nil, nil, err
				}
				return res.HTTPResponse, res.Body, res.JSON200, nil
			})
		},
	}
	enable := func(on bool) *cobra.Command {
		use, short := "enable NAME", "Enable a trigger"
		if !on {
			use, short = "disable NAME", "Disable a trigger (it queues and starts nothing)"
		}
		return &cobra.Command{
			Use: use, Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return o.triggerCall(cmd, func(ctx context.Context, s *session) (*http.Response, []byte, *gen.Trigger, error) {
					res, err := s.c.UpdateTriggerWithResponse(ctx, s.Project, args[0], gen.TriggerUpdate{Enabled: on})
					if err != nil {
						return nil, nil, nil, err
					}
					return res.HTTPResponse, res.Body, res.JSON200, nil
				})
			},
		}
	}
	firings := &cobra.Command{
		Use: "firings NAME", Short: "A trigger's firings, newest first, with the runs they started", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListTriggerFiringsWithResponse(cmd.Context(), s.Project, args[0], nil)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table {
				t := table{{"FIRED", "SOURCE", "STATE", "ATTEMPTS", "RUN", "ERROR"}}
				for _, f := range res.JSON200.Items {
					t = append(t, []string{f.CreatedAt.Local().Format(time.RFC3339), f.Source, string(f.State),
						strconv.Itoa(f.Attempts), first(deref(f.RunId), "-"), deref(f.Error)})
				}
				return t
			})
		},
	}
	del := &cobra.Command{
		Use: "delete NAME", Short: "Delete a trigger and its firing log (its runs stay)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.DeleteTriggerWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusNoContent); err != nil {
				return err
			}
			fmt.Fprintf(o.stderr, "trigger %s deleted\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(create, list, get, enable(true), enable(false), firings, del)
	return cmd
}

// triggerCall runs one call answering a trigger and prints it.
func (o *options) triggerCall(cmd *cobra.Command, call func(context.Context, *session) (*http.Response, []byte, *gen.Trigger, error)) error {
	s, err := o.session()
	if err != nil {
		return err
	}
	hr, raw, t, err := call(cmd.Context(), s)
	if err != nil {
		return unreachable(err)
	}
	if err := expect(hr, raw, http.StatusOK); err != nil {
		return err
	}
	return o.print(o.stdout, t, func() table { return triggersTable(*t) })
}

func triggersTable(items ...gen.Trigger) table {
	t := table{{"NAME", "ON", "STARTS", "ENABLED", "PER MINUTE"}}
	for _, tr := range items {
		on := "hook " + deref(tr.HookUrl)
		if rf := tr.On.RunFinished; rf != nil {
			var ss []string
			for _, s := range deref(rf.States) {
				ss = append(ss, string(s))
			}
			on = fmt.Sprintf("run of %s %s", rf.Pipeline, strings.Join(ss, "|"))
		}
		starts := tr.Pipeline
		if tr.Version != nil {
			starts += " v" + strconv.Itoa(*tr.Version)
		}
		t = append(t, []string{tr.Name, on, starts, strconv.FormatBool(tr.Enabled), strconv.Itoa(tr.MaxPerMinute)})
	}
	return t
}
