package cli

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

func cacheCmd(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "cache", Short: "List and evict the project's step cache entries", GroupID: GroupID}
	var (
		pipeline, step string
		limit          int
		all            bool
	)
	list := &cobra.Command{
		Use:   "list [--pipeline P] [--step S]",
		Short: "List live step cache entries, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			p := gen.ListCacheEntriesParams{PageSize: &limit}
			if pipeline != "" {
				p.Pipeline = &pipeline
			}
			if step != "" {
				p.Step = &step
			}
			res, err := s.c.ListCacheEntriesWithResponse(cmd.Context(), s.Project, &p)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			return o.print(o.stdout, res.JSON200, func() table { return cacheTable(o, res.JSON200.Entries) })
		},
	}
	list.Flags().StringVar(&pipeline, "pipeline", "", "only entries of this pipeline")
	list.Flags().StringVar(&step, "step", "", "only entries of this step")
	list.Flags().IntVar(&limit, "limit", 50, "entries to show")

	evict := &cobra.Command{
		Use:   "evict (KEY | --pipeline P [--step S] | --step S | --all)",
		Short: "Evict entries: their steps run again in the next run",
		Example: `  atelier cache evict --pipeline train --step prepare
  atelier cache evict 084fb6a2ab4f…   # a step's cacheKey
  atelier cache evict --all`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && (pipeline != "" || step != "" || all) {
				return fmt.Errorf("give a key or filters, not both")
			}
			if len(args) == 0 && pipeline == "" && step == "" && !all {
				return fmt.Errorf("say what to evict: a key, --pipeline and/or --step, or --all")
			}
			s, err := o.session()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				res, err := s.c.EvictCacheEntryWithResponse(cmd.Context(), s.Project, args[0])
				if err != nil {
					return unreachable(err)
				}
				if err := expect(res.HTTPResponse, res.Body, http.StatusNoContent); err != nil {
					return err
				}
				fmt.Fprintf(o.stderr, "evicted %s\n", args[0])
				return nil
			}
			p := gen.EvictCacheEntriesParams{}
			if pipeline != "" {
				p.Pipeline = &pipeline
			}
			if step != "" {
				p.Step = &step
			}
			res, err := s.c.EvictCacheEntriesWithResponse(cmd.Context(), s.Project, &p)
			if err != nil {
				return unreachable(err)
			}
			if err := expect(res.HTTPResponse, res.Body, http.StatusOK); err != nil {
				return err
			}
			fmt.Fprintf(o.stderr, "evicted %d entries\n", res.JSON200.Evicted)
			return nil
		},
	}
	evict.Flags().StringVar(&pipeline, "pipeline", "", "evict the entries of this pipeline")
	evict.Flags().StringVar(&step, "step", "", "evict the entries of this step")
	evict.Flags().BoolVar(&all, "all", false, "evict every entry of the project")
	cmd.AddCommand(list, evict)
	return cmd
}

func cacheTable(o *options, entries []gen.CacheEntry) table {
	t := table{{"KEY", "PIPELINE", "STEP", "RUN", "ATTEMPT", "AGE", "EXPIRES"}}
	for _, e := range entries {
		step := e.Step
		if e.Item != nil {
			step += "[" + strconv.Itoa(*e.Item) + "]"
		}
		expires := "never"
		if e.ExpiresAt != nil {
			expires = e.ExpiresAt.Local().Format(time.RFC3339)
		}
		t = append(t, []string{e.Key, e.Pipeline, step, e.RunId, strconv.Itoa(e.Attempt), ago(e.CreatedAt, o.now()), expires})
	}
	return t
}
