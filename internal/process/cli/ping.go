package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

// pingCmd checks that a gateway answers and is ready, without a token:
// the Helm chart's `helm test` runs it, and so can any script waiting for
// an installation.
func pingCmd(o *options) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "ping [URL]",
		Short: "Check that a gateway is up and ready (its Postgres and Temporal reachable); no token needed",
		Long: `Ping asks the gateway's /readyz, which checks Postgres and Temporal, and
exits 0 when it is ready. With --wait it retries until then. URL defaults
to --url, ATELIER_URL or the current context's.`,
		Example: `  atelier ping http://atelier-gateway.atelier.svc:8080
  atelier ping --wait 2m`,
		Args:    cobra.MaximumNArgs(1),
		GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			var target string
			if len(args) == 1 {
				target = args[0]
			} else {
				t, err := o.target()
				if err != nil {
					return err
				}
				target = t.URL
			}
			u, err := url.Parse(target)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("URL %q: want http(s)://host[:port]", target)
			}
			c, err := gen.NewClientWithResponses(strings.TrimRight(target, "/"), gen.WithHTTPClient(&http.Client{Timeout: 20 * time.Second}))
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if wait > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, wait)
				defer cancel()
			}
			for {
				err := ready(ctx, c)
				if err == nil {
					fmt.Fprintf(o.stdout, "%s is ready\n", target)
					return nil
				}
				if wait == 0 || ctx.Err() != nil {
					return err
				}
				select {
				case <-ctx.Done():
					return err
				case <-time.After(time.Second):
				}
			}
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 0, "retry until the gateway is ready or this long has passed")
	return cmd
}

// ready asks /readyz once.
func ready(ctx context.Context, c *gen.ClientWithResponses) error {
	res, err := c.GetReadyzWithResponse(ctx)
	if err != nil {
		return unreachable(err)
	}
	if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
		var pe *ProblemError
		if errors.As(err, &pe) && pe.Status == http.StatusServiceUnavailable {
			return fmt.Errorf("the gateway is up but not ready: %w", err)
		}
		return err
	}
	return nil
}
