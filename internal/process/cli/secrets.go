package cli

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

func secretsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "secrets", Short: "Set, list and delete the project's secrets (values are write-only)", GroupID: GroupID}
	var fromFile string
	set := &cobra.Command{
		Use:   "set NAME [--from-file PATH]",
		Short: "Create or replace a secret; the value is read from standard input or a file, never from the command line",
		Example: `  printf %s "$DB_PASSWORD" | atelier secrets set db-password
  atelier secrets set hf-token --from-file ~/.cache/huggingface/token`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in := cmd.InOrStdin()
			if fromFile != "" {
				f, err := os.Open(fromFile)
				if err != nil {
					return err
				}
				defer f.Close()
				in = f
			}
			value, err := io.ReadAll(io.LimitReader(in, 64<<10+1))
			if err != nil {
				return err
			}
			// A value typed at a terminal ends with the newline that sent it.
			value = bytes.TrimSuffix(bytes.TrimSuffix(value, []byte("\n")), []byte("\r"))
			s, err := o.session()
			if err != nil {
				return err
			}
			v := string(value)
			res, err := s.c.PutSecretWithResponse(cmd.Context(), s.Project, args[0], gen.SecretValue{Value: &v})
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK, http.StatusCreated); err != nil {
				return err
			}
			sec := res.JSON200
			verb := "replaced"
			if res.JSON201 != nil {
				sec, verb = res.JSON201, "created"
			}
			fmt.Fprintf(o.stderr, "%s secret %s (version %d)\n", verb, sec.Name, sec.Version)
			return nil
		},
	}
	set.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file instead of standard input")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the project's secrets (names and versions, never values)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListSecretsWithResponse(cmd.Context(), s.Project)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table {
				t := table{{"NAME", "VERSION", "UPDATED", "BY"}}
				for _, sec := range res.JSON200.Items {
					t = append(t, []string{sec.Name, strconv.Itoa(sec.Version), ago(sec.UpdatedAt, o.now()), sec.UpdatedBy})
				}
				return t
			})
		},
	}
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a secret: steps that reference it fail from then on",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.DeleteSecretWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusNoContent); err != nil {
				return err
			}
			fmt.Fprintf(o.stderr, "deleted secret %s\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(set, list, del)
	return cmd
}
