package store

import (
	"context"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// CreateProject creates a project; CreatedAt is set by the database.
// ErrConflict if the name is taken.
func (s *Store) CreateProject(ctx context.Context, p catalog.Project) (catalog.Project, error) {
	if p.Name == "" {
		return catalog.Project{}, invalid("empty project name")
	}
	row, err := s.q.CreateProject(ctx, db.CreateProjectParams{Name: p.Name, Description: p.Description})
	if err != nil {
		return catalog.Project{}, mapErr(err, "create project %q", p.Name)
	}
	return toProject(row), nil
}

// GetProject returns a project or ErrNotFound.
func (s *Store) GetProject(ctx context.Context, name string) (catalog.Project, error) {
	row, err := s.q.GetProject(ctx, name)
	if err != nil {
		return catalog.Project{}, mapErr(err, "project %q", name)
	}
	return toProject(row), nil
}

// ListProjects returns every project by name.
func (s *Store) ListProjects(ctx context.Context) ([]catalog.Project, error) {
	rows, err := s.q.ListProjects(ctx)
	if err != nil {
		return nil, mapErr(err, "list projects")
	}
	out := make([]catalog.Project, len(rows))
	for i, r := range rows {
		out[i] = toProject(r)
	}
	return out, nil
}

func toProject(r db.Project) catalog.Project {
	return catalog.Project{Name: r.Name, Description: r.Description, CreatedAt: utc(r.CreatedAt)}
}
