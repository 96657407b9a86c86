package cli

import (
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/spf13/cobra"
)

// options are the flags every client command shares.
type options struct {
	url, token, project, context string
	output                       string
	stdout, stderr               io.Writer
	now                          func() time.Time
}

// Commands returns the client commands, to be added to the root command;
// they take their output streams from it.
func Commands() []*cobra.Command {
	o := &options{now: time.Now}
	bind := func(cmd *cobra.Command) *cobra.Command {
		f := cmd.PersistentFlags()
		f.StringVar(&o.url, "url", "", "gateway URL (env ATELIER_URL; default: the current context's)")
		f.StringVar(&o.token, "token", "", "API token (env ATELIER_TOKEN; default: the current context's)")
		f.StringVarP(&o.project, "project", "P", "", "project (env ATELIER_PROJECT; default: the context's, else \"default\")")
		f.StringVar(&o.context, "context", "", "config file context to use instead of the current one")
		f.StringVarP(&o.output, "output", "o", outTable, "output format: table, json or yaml")
		prev := cmd.PersistentPreRunE
		cmd.PersistentPreRunE = func(c *cobra.Command, args []string) error {
			o.stdout, o.stderr = c.OutOrStdout(), c.ErrOrStderr()
			if prev != nil {
				return prev(c, args)
			}
			return nil
		}
		return cmd
	}
	return []*cobra.Command{
		bind(loginCmd(o)),
		bind(pingCmd(o)),
		bind(pipelinesCmd(o)),
		bind(runCmd(o)),
		bind(runsCmd(o)),
		bind(logsCmd(o)),
		bind(itemsCmd(o)),
		bind(cancelCmd(o)),
		bind(retryCmd(o)),
		bind(approvalCmd(o, true)),
		bind(approvalCmd(o, false)),
		bind(schedulesCmd(o)),
		bind(endpointsCmd(o)),
		bind(cacheCmd(o)),
		bind(secretsCmd(o)),
		bind(artifactsCmd(o)),
		bind(modelsCmd(o)),
		bind(triggersCmd(o)),
	}
}

// GroupID is the help group of the client commands.
const GroupID = "client"

func loginCmd(o *options) *cobra.Command {
	var name string
	cmd := &cobra.Command{
		Use:   "login URL --token TOKEN",
		Short: "Check a gateway URL and token, and save them as the current context",
		Example: `  atelier login http://127.0.0.1:8080 --token "$(cat .atelier/admin-token)"
  atelier login https://atelier.example.com --token "$TOKEN" --project vision --context prod`,
		Args:    cobra.ExactArgs(1),
		GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			u, err := url.Parse(args[0])
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("URL %q: want http(s)://host[:port]", args[0])
			}
			if o.token == "" {
				return fmt.Errorf("--token is required (a project token, or the admin token `atelier dev` prints)")
			}
			o.url = args[0]
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.GetProjectWithResponse(cmd.Context(), s.Project)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
				switch {
				case isStatus(err, 401):
					return fmt.Errorf("the gateway refused the token: %w", err)
				case isStatus(err, 404):
					return fmt.Errorf("project %q does not exist or this token cannot see it (use --project): %w", s.Project, err)
				}
				return err
			}
			f, path, err := loadFile()
			if err != nil {
				return err
			}
			name = first(name, u.Host)
			f.Contexts[name] = s.Context
			f.Current = name
			if err := f.save(path); err != nil {
				return err
			}
			fmt.Fprintf(o.stderr, "logged in to %s, project %s (context %q in %s)\n", s.URL, s.Project, name, path)
			return nil
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "context name (default: the URL's host:port)")
	return cmd
}
