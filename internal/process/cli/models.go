package cli

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

func modelsCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "models", Short: "The model registry: models, their versions and aliases", GroupID: GroupID}
	ls := &cobra.Command{
		Use:   "ls [MODEL]",
		Short: "List the project's models (with their aliases), or a model's versions",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			if len(args) == 0 {
				res, err := s.c.ListModelsWithResponse(cmd.Context(), s.Project)
				if err != nil {
					return unreachable(err)
				}
				if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
					return err
				}
				return o.print(o.stdout, res.JSON200, func() table {
					t := table{{"MODEL", "LATEST", "ALIASES", "CREATED", "BY", "DESCRIPTION"}}
					for _, m := range res.JSON200.Items {
						t = append(t, []string{m.Name, strconv.Itoa(m.Latest), aliasList(m.Aliases), ago(m.CreatedAt, o.now()), m.CreatedBy, m.Description})
					}
					return t
				})
			}
			res, err := s.c.ListModelVersionsWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table {
				t := table{{"VERSION", "ALIASES", "ARTIFACT", "SIZE", "RUN", "STEP", "CREATED", "BY"}}
				for _, v := range res.JSON200.Items {
					t = append(t, []string{strconv.Itoa(v.Version), strings.Join(v.Aliases, ","), v.Artifact.Id, artifactSize(v.Artifact),
						v.Artifact.Producer.Run, stepLabel(v.Artifact.Producer.Step, v.Artifact.Producer.Item), ago(v.CreatedAt, o.now()), v.CreatedBy})
				}
				return t
			})
		},
	}
	show := &cobra.Command{
		Use:   "show MODEL[@VERSION|@ALIAS]",
		Short: "A model's aliases, or one version with the run that made it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			name, ref, hasRef := strings.Cut(args[0], "@")
			if !hasRef {
				res, err := s.c.GetModelWithResponse(cmd.Context(), s.Project, name)
				if err != nil {
					return unreachable(err)
				}
				if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
					return err
				}
				m := res.JSON200
				return o.print(o.stdout, m, func() table {
					t := table{{"MODEL", m.Name}, {"LATEST", strconv.Itoa(m.Latest)}}
					aliases := make([]string, 0, len(m.Aliases))
					for a := range m.Aliases {
						aliases = append(aliases, a)
					}
					sort.Strings(aliases)
					for _, a := range aliases {
						t = append(t, []string{"ALIAS " + a, "version " + strconv.Itoa(m.Aliases[a])})
					}
					return t
				})
			}
			res, err := s.c.GetModelVersionWithResponse(cmd.Context(), s.Project, name, ref)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			v := res.JSON200
			return o.print(o.stdout, v, func() table {
				a := v.Artifact
				return table{
					{"MODEL", fmt.Sprintf("%s version %d", v.Model, v.Version)},
					{"ALIASES", strings.Join(v.Aliases, ", ")},
					{"ARTIFACT", a.Id + " (" + artifactSize(a) + ", " + a.Digest + ")"},
					{"MADE BY", fmt.Sprintf("run %s, step %s, attempt %d", a.Producer.Run, stepLabel(a.Producer.Step, a.Producer.Item), a.Producer.Attempt)},
					{"FORMAT", v.Format},
				}
			})
		},
	}
	alias := &cobra.Command{
		Use:   "alias MODEL ALIAS VERSION",
		Short: "Point an alias (champion, candidate, ...) at a version; recorded with who moved it",
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			version, err := strconv.Atoi(args[2])
			if err != nil || version < 1 {
				return fmt.Errorf("VERSION must be a version number, got %q", args[2])
			}
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.SetModelAliasWithResponse(cmd.Context(), s.Project, args[0], args[1], gen.ModelAliasUpdate{Version: version})
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			fmt.Fprintf(o.stderr, "%s@%s is version %d\n", args[0], args[1], version)
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm MODEL@VERSION",
		Short: "Delete a version; refused while an alias names it or an endpoint serves it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, ref, ok := strings.Cut(args[0], "@")
			if n, err := strconv.Atoi(ref); !ok || err != nil || n < 1 {
				return fmt.Errorf("name the version as MODEL@VERSION (a number), got %q", args[0])
			}
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.DeleteModelVersionWithResponse(cmd.Context(), s.Project, name, ref)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusNoContent); err != nil {
				return err
			}
			fmt.Fprintf(o.stderr, "deleted %s\n", args[0])
			return nil
		},
	}
	endpoints := &cobra.Command{
		Use:   "endpoints MODEL",
		Short: "The endpoints that serve versions of a model, and which",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListModelEndpointsWithResponse(cmd.Context(), s.Project, args[0])
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table {
				t := table{{"ENDPOINT", "REVISION", "ROLE", "VERSION", "REF", "FOLLOWS", "RUN"}}
				for _, v := range res.JSON200.Items {
					t = append(t, []string{v.Endpoint, strconv.Itoa(v.Revision), string(v.Role), strconv.Itoa(v.Version), v.Ref, strconv.FormatBool(v.Follow), deref(v.Run)})
				}
				return t
			})
		},
	}
	cmd.AddCommand(ls, show, alias, rm, endpoints)
	return cmd
}

// aliasList prints a model's aliases as "alias=version" by alias name,
// comma-separated, or "-" when it has none.
func aliasList(aliases map[string]int) string {
	if len(aliases) == 0 {
		return "-"
	}
	names := make([]string, 0, len(aliases))
	for a := range aliases {
		names = append(names, a)
	}
	sort.Strings(names)
	for i, a := range names {
		names[i] = a + "=" + strconv.Itoa(aliases[a])
	}
	return strings.Join(names, ",")
}
