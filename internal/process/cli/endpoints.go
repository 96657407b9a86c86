package cli

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

func endpointsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "endpoints", Aliases: []string{"endpoint", "ep"}, Short: "Show inference endpoints and steer their rollouts", GroupID: GroupID}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the project's endpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListEndpointsWithResponse(cmd.Context(), s.Project)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table {
				t := table{{"NAME", "CREATED"}}
				for _, e := range res.JSON200.Items {
					created := "-"
					if e.CreatedAt != nil {
						created = ago(*e.CreatedAt, o.now())
					}
					t = append(t, []string{e.Name, created})
				}
				return t
			})
		},
	}
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show an endpoint: revisions, replicas, traffic and its rollout",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.endpointCall(cmd, args[0], func(ctx context.Context, s *session) (*gen.Endpoint, error) {
				res, err := s.c.GetEndpointWithResponse(ctx, s.Project, args[0])
				if err != nil {
					return nil, unreachable(err)
				}
				return res.JSON200, expect(res.HTTPResponse, res.Body, 200)
			})
		},
	}
	promote := &cobra.Command{
		Use:   "promote NAME",
		Short: "Skip the rollout's current pause, or promote a blue-green preview",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.endpointCall(cmd, args[0], func(ctx context.Context, s *session) (*gen.Endpoint, error) {
				res, err := s.c.PromoteEndpointWithResponse(ctx, s.Project, args[0])
				if err != nil {
					return nil, unreachable(err)
				}
				return res.JSON200, expect(res.HTTPResponse, res.Body, 200)
			})
		},
	}
	abort := &cobra.Command{
		Use:   "abort NAME",
		Short: "Roll the rollout in progress back now",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.endpointCall(cmd, args[0], func(ctx context.Context, s *session) (*gen.Endpoint, error) {
				res, err := s.c.AbortEndpointWithResponse(ctx, s.Project, args[0])
				if err != nil {
					return nil, unreachable(err)
				}
				return res.JSON200, expect(res.HTTPResponse, res.Body, 200)
			})
		},
	}
	var to int
	rollback := &cobra.Command{
		Use:   "rollback NAME --to REVISION",
		Short: "Roll an earlier revision's spec out as a new revision",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to <= 0 {
				return fmt.Errorf("--to REVISION is required")
			}
			return o.endpointCall(cmd, args[0], func(ctx context.Context, s *session) (*gen.Endpoint, error) {
				res, err := s.c.RollbackEndpointWithResponse(ctx, s.Project, args[0], gen.EndpointRollback{Revision: to})
				if err != nil {
					return nil, unreachable(err)
				}
				return res.JSON200, expect(res.HTTPResponse, res.Body, 200)
			})
		},
	}
	rollback.Flags().IntVar(&to, "to", 0, "the revision whose spec to roll out again")
	cmd.AddCommand(list, get, promote, abort, rollback)
	return cmd
}

// endpointCall runs one call answering an endpoint and prints it.
func (o *options) endpointCall(cmd *cobra.Command, _ string, call func(context.Context, *session) (*gen.Endpoint, error)) error {
	s, err := o.session()
	if err != nil {
		return err
	}
	e, err := call(cmd.Context(), s)
	if err != nil {
		return err
	}
	return o.print(o.stdout, e, func() table { return endpointTable(e) })
}

func endpointTable(e *gen.Endpoint) table {
	weights := map[int]int{}
	for _, w := range e.Traffic {
		weights[w.Revision] = w.Weight
	}
	t := table{{"REVISION", "ROLE", "REPLICAS", "READY", "TRAFFIC", "WAITING"}}
	for _, ob := range e.Observed {
		role := "-"
		switch {
		case ob.Revision == e.Stable:
			role = "stable"
		case e.Rollout != nil && ob.Revision == e.Rollout.Revision:
			role = "candidate"
		}
		t = append(t, []string{strconv.Itoa(ob.Revision), role, strconv.Itoa(ob.Replicas), strconv.Itoa(ob.Ready),
			strconv.Itoa(weights[ob.Revision]) + "%", str(ob.Waiting)})
	}
	if e.Rollout != nil {
		r := e.Rollout
		t = append(t, []string{""}, []string{"ROLLOUT", r.Strategy, r.Stage, r.Action, strings.ReplaceAll(str(r.Reason), "\n", " ")})
	}
	return t
}
