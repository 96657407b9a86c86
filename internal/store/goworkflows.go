package store

import (
	"context"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// UpsertGoWorkflow records (or refreshes) a native Go workflow registered by
// a worker; UpdatedAt is set by the database.
func (s *Store) UpsertGoWorkflow(ctx context.Context, w catalog.GoWorkflow) error {
	if w.Name == "" {
		return invalid("empty workflow name")
	}
	err := s.q.UpsertGoWorkflow(ctx, db.UpsertGoWorkflowParams{
		Name: w.Name, Description: w.Description, TaskQueue: w.TaskQueue,
	})
	return mapErr(err, "upsert go workflow %q", w.Name)
}

// ListGoWorkflows returns every registered Go workflow by name.
func (s *Store) ListGoWorkflows(ctx context.Context) ([]catalog.GoWorkflow, error) {
	rows, err := s.q.ListGoWorkflows(ctx)
	if err != nil {
		return nil, mapErr(err, "list go workflows")
	}
	out := make([]catalog.GoWorkflow, len(rows))
	for i, r := range rows {
		out[i] = toGoWorkflow(r)
	}
	return out, nil
}

// GetGoWorkflow returns one Go workflow or ErrNotFound.
func (s *Store) GetGoWorkflow(ctx context.Context, name string) (catalog.GoWorkflow, error) {
	row, err := s.q.GetGoWorkflow(ctx, name)
	if err != nil {
		return catalog.GoWorkflow{}, mapErr(err, "go workflow %q", name)
	}
	return toGoWorkflow(row), nil
}

func toGoWorkflow(r db.GoWorkflow) catalog.GoWorkflow {
	return catalog.GoWorkflow{Name: r.Name, Description: r.Description, TaskQueue: r.TaskQueue, UpdatedAt: utc(r.UpdatedAt)}
}
