package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/atelier-ml/atelier/api/gen"
)

func itemsCmd(o *options) *cobra.Command {
	var (
		state string
		limit int
	)
	cmd := &cobra.Command{
		Use:   "items RUN STEP [--state FAILED] [--limit N]",
		Short: "List the items of a forEach step (wide steps: from Postgres, page by page)",
		Long: `Items lists a forEach step's items in index order, optionally only those in
one state, following the API's pages until --limit items (0: all). Each
item's log: atelier logs RUN STEP --item I.`,
		Args:    cobra.ExactArgs(2),
		GroupID: GroupID,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := o.session()
			if err != nil {
				return err
			}
			pageSize := 1000
			params := &gen.ListStepItemsParams{PageSize: &pageSize}
			if state != "" {
				st := gen.StepState(strings.ToUpper(state))
				params.State = &st
			}
			var items []gen.StepItem
			var last gen.StepItemPage
			for {
				res, err := s.c.ListStepItemsWithResponse(cmd.Context(), s.Project, args[0], args[1], params)
				if err != nil {
					return unreachable(err)
				}
				if err := expect(res.HTTPResponse, res.Body, 200); err != nil {
					return err
				}
				last = *res.JSON200
				items = append(items, last.Items...)
				if last.NextPageToken == nil || (limit > 0 && len(items) >= limit) {
					break
				}
				params.PageToken = last.NextPageToken
			}
			if limit > 0 && len(items) > limit {
				items = items[:limit]
			}
			if c := last.Counts; c != nil {
				fmt.Fprintf(o.stderr, "%d items: %d succeeded, %d failed, %d cancelled, %d cached, %d skipped, %d never ran\n",
					deref(last.Total), c.Succeeded, c.Failed, c.Cancelled, c.Cached, c.Skipped, c.NotRun)
			}
			return o.print(o.stdout, items, func() table { return itemsTable(items) })
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only items in this state (SUCCEEDED, FAILED, CANCELLED, CACHED, ...)")
	cmd.Flags().IntVar(&limit, "limit", 0, "stop after this many items (0: all)")
	return cmd
}

func itemsTable(items []gen.StepItem) table {
	t := table{{"INDEX", "STATE", "ATTEMPTS", "EXIT", "ITEM", "ERROR"}}
	for _, it := range items {
		attempts, exit := "0", "-"
		if it.Attempts != nil && len(*it.Attempts) > 0 {
			attempts = strconv.Itoa(len(*it.Attempts))
			if c := (*it.Attempts)[len(*it.Attempts)-1].ExitCode; c != nil {
				exit = strconv.Itoa(*c)
			}
		}
		item := fmt.Sprint(it.Item)
		if len(item) > 40 {
			item = item[:37] + "..."
		}
		msg := first(str(it.Error), str(it.Message))
		if len(msg) > 80 {
			msg = msg[:77] + "..."
		}
		t = append(t, []string{strconv.Itoa(it.Index), string(it.State), attempts, exit, item, strings.ReplaceAll(msg, "\n", " ")})
	}
	return t
}
