package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/atelier-ml/atelier/api/gen"
)

func pipelinesCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "pipelines", Aliases: []string{"pipeline", "pl"}, Short: "Push, list and show declarative pipelines", GroupID: GroupID}
	var name string
	push := &cobra.Command{
		Use:   "push FILE",
		Short: "Store a pipeline spec (YAML or JSON) as the pipeline's next version",
		Long: `Push validates the spec on the gateway and stores it as a new version, or
answers the newest version unchanged when the spec is the same. The
pipeline's name is --name, else the file's name without its extension.
Every validation problem is printed with its path and line in the file.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			s, err := o.session()
			if err != nil {
				return err
			}
			pipeline := first(name, strings.TrimSuffix(filepath.Base(args[0]), filepath.Ext(args[0])))
			ct := "application/yaml"
			if strings.EqualFold(filepath.Ext(args[0]), ".json") {
				ct = "application/json"
			}
			res, err := s.c.CreatePipelineVersionWithBodyWithResponse(cmd.Context(), s.Project, pipeline, ct, bytes.NewReader(raw))
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200, 201); err != nil {
				if pe, ok := err.(*ProblemError); ok {
					pe.Lines = lines(raw, pe.Problem.Errors)
				}
				return err
			}
			v := res.JSON201
			outcome := "created"
			if v == nil {
				v, outcome = res.JSON200, "unchanged"
			}
			return o.print(o.stdout, v, func() table {
				return table{{"PIPELINE", "VERSION", "DIGEST", "OUTCOME"}, {v.Pipeline, strconv.Itoa(v.Version), short(v.Digest), outcome}}
			})
		},
	}
	push.Flags().StringVar(&name, "name", "", "pipeline name (default: the file name without its extension)")

	list := &cobra.Command{
		Use:   "list",
		Short: "List the project's pipelines",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.ListPipelinesWithResponse(cmd.Context(), s.Project)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table {
				t := table{{"NAME", "LATEST", "UPDATED"}}
				for _, p := range res.JSON200.Pipelines {
					t = append(t, []string{p.Name, strconv.Itoa(p.LatestVersion), ago(p.UpdatedAt, o.now())})
				}
				return t
			})
		},
	}

	var version string
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a pipeline version and its spec (-o yaml for the whole spec)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			res, err := s.c.GetPipelineVersionWithResponse(cmd.Context(), s.Project, args[0], version)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
				return err
			}
			v := res.JSON200
			return o.print(o.stdout, v, func() table {
				return table{{"PIPELINE", "VERSION", "DIGEST", "CREATED", "BY"},
					{v.Pipeline, strconv.Itoa(v.Version), short(v.Digest), ago(v.CreatedAt, o.now()), str(v.CreatedBy)}}
			})
		},
	}
	get.Flags().StringVar(&version, "version", "latest", "version number, or latest")
	cmd.AddCommand(push, list, get)
	return cmd
}

func short(digest string) string {
	if i := strings.IndexByte(digest, ':'); i >= 0 {
		digest = digest[i+1:]
	}
	return digest[:min(12, len(digest))]
}

// lines finds each field error's line in the file sent: its path
// (steps[2].dependsOn[0]) walked through the YAML (or JSON) document.
func lines(raw []byte, errs *[]gen.FieldError) map[string]int {
	var doc yaml.Node
	if errs == nil || yaml.Unmarshal(raw, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	out := map[string]int{}
	for _, fe := range *errs {
		if n := walk(doc.Content[0], fe.Path); n != nil {
			out[fe.Path] = n.Line
		}
	}
	return out
}

// walk follows a path as far as the document goes: a path into a field
// that is missing points at its parent, the nearest place to fix.
func walk(n *yaml.Node, path string) *yaml.Node {
	for _, seg := range splitPath(path) {
		next := child(n, seg)
		if next == nil {
			return n
		}
		n = next
	}
	return n
}

func child(n *yaml.Node, seg string) *yaml.Node {
	if i, err := strconv.Atoi(seg); err == nil && n.Kind == yaml.SequenceNode {
		if i >= 0 && i < len(n.Content) {
			return n.Content[i]
		}
		return nil
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == seg {
				return n.Content[i+1]
			}
		}
	}
	return nil
}

// splitPath splits steps[2].dependsOn[0] into steps, 2, dependsOn, 0.
func splitPath(path string) []string {
	var out []string
	for _, part := range strings.Split(path, ".") {
		for part != "" {
			i := strings.IndexByte(part, '[')
			if i < 0 {
				out = append(out, part)
				break
			}
			if i > 0 {
				out = append(out, part[:i])
			}
			j := strings.IndexByte(part[i:], ']')
			if j < 0 {
				out = append(out, part[i+1:])
				break
			}
			out = append(out, part[i+1:i+j])
			part = part[i+j+1:]
		}
	}
	return out
}
