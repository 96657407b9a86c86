package api

import (
	"context"
	"errors"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// ProjectStore manages projects, the tenant boundary.
type ProjectStore interface {
	CreateProject(ctx context.Context, p catalog.Project) (catalog.Project, error)
	GetProject(ctx context.Context, name string) (catalog.Project, error)
	ListProjects(ctx context.Context) ([]catalog.Project, error)
}

// CreateProject is admin-only (enforced by authenticate from the spec).
func (s *server) CreateProject(ctx context.Context, req gen.CreateProjectRequestObject) (gen.CreateProjectResponseObject, error) {
	body := deref(req.Body)
	p, err := s.cat.CreateProject(ctx, catalog.Project{
		Name:        body.Name,
		Description: deref(body.Description),
		CreatedAt:   s.now().UTC(),
	})
	if errors.Is(err, catalog.ErrConflict) {
		return nil, newProblem(ptAlreadyExists, "project %q already exists", body.Name)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.CreateProject201JSONResponse{
		Body:    projectView(p),
		Headers: gen.CreateProject201ResponseHeaders{Location: s.link("/v1/projects/%s", p.Name)},
	}, nil
}

// ListProjects shows admins every project and other tokens their own.
func (s *server) ListProjects(ctx context.Context, _ gen.ListProjectsRequestObject) (gen.ListProjectsResponseObject, error) {
	tok := principal(ctx)
	var list []catalog.Project
	if tok.Role == tokens.RoleAdmin {
		var err error
		if list, err = s.cat.ListProjects(ctx); err != nil {
			return nil, internalError(err)
		}
	} else {
		p, err := s.cat.GetProject(ctx, tok.Project)
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return nil, internalError(err)
		}
		if err == nil {
			list = append(list, p)
		}
	}
	return gen.ListProjects200JSONResponse{Projects: projectViews(list)}, nil
}

// GetProject returns one project; scope was checked by authenticate.
func (s *server) GetProject(ctx context.Context, req gen.GetProjectRequestObject) (gen.GetProjectResponseObject, error) {
	p, err := s.cat.GetProject(ctx, req.Project)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, projectNotFound(req.Project)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.GetProject200JSONResponse(projectView(p)), nil
}
