package cli

import (
	"context"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

// approvalCmd is `atelier approve` or `atelier reject` (approve false).
func approvalCmd(o *options, approve bool) *cobra.Command {
	var comment string
	use, short := "approve RUN STEP", "Approve a step waiting for approval"
	if !approve {
		use, short = "reject RUN STEP", "Reject a step waiting for approval (the step fails)"
	}
	cmd := &cobra.Command{
		Use: use, Short: short, Args: cobra.ExactArgs(2), GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			body := gen.ApprovalDecisionRequest{}
			if comment != "" {
				body.Comment = &comment
			}
			decide := func(ctx context.Context) (*http.Response, []byte, *gen.Run, error) {
				if approve {
					res, err := s.c.ApproveStepWithResponse(ctx, s.Project, args[0], args[1], body)
					if err != nil {
						return nil, nil, nil, err
					}
					return res.HTTPResponse, res.Body, res.JSON200, nil
				}
				res, err := s.c.RejectStepWithResponse(ctx, s.Project, args[0], args[1], body)
				if err != nil {
					return nil, nil, nil, err
				}
				return res.HTTPResponse, res.Body, res.JSON200, nil
			}
			hr, raw, run, err := decide(cmd.Context())
			if err != nil {
				return unreachable(err)
			}
			if err := expect(hr, raw, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, run, func() table { return stepsTable(o, run.Status) })
		},
	}
	cmd.Flags().StringVarP(&comment, "comment", "m", "", "why (required when the step says so)")
	return cmd
}
