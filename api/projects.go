package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// ProjectStore manages projects, the tenant boundary.
type ProjectStore interface {
	CreateProject(ctx context.Context, p catalog.Project) (catalog.Project, error)
	GetProject(ctx context.Context, name string) (catalog.Project, error)
	ListProjects(ctx context.Context) ([]catalog.Project, error)
}

// CreateProject is admin-only (enforced by authenticate from the spec).
func (s *server) CreateProject(c echo.Context) error {
	var req gen.CreateProjectRequest
	if err := decodeJSON(c, &req, false); err != nil {
		return err
	}
	p, err := s.cat.CreateProject(c.Request().Context(), catalog.Project{
		Name:        req.Name,
		Description: deref(req.Description),
		CreatedAt:   s.now().UTC(),
	})
	if errors.Is(err, catalog.ErrConflict) {
		return newProblem(ptAlreadyExists, "project %q already exists", req.Name)
	}
	if err != nil {
		return internalError(err)
	}
	c.Response().Header().Set(echo.HeaderLocation, s.link("/v1/projects/%s", p.Name))
	return c.JSON(http.StatusCreated, p)
}

// ListProjects shows admins every project and other tokens their own.
func (s *server) ListProjects(c echo.Context) error {
	tok := principal(c)
	ctx := c.Request().Context()
	var list []catalog.Project
	if tok.Role == catalog.RoleAdmin {
		var err error
		if list, err = s.cat.ListProjects(ctx); err != nil {
			return internalError(err)
		}
	} else {
		p, err := s.cat.GetProject(ctx, tok.Project)
		if err != nil && !errors.Is(err, catalog.ErrNotFound) {
			return internalError(err)
		}
		if err == nil {
			list = append(list, p)
		}
	}
	if list == nil {
		list = []catalog.Project{}
	}
	return c.JSON(http.StatusOK, gen.ProjectList{Projects: list})
}

// GetProject returns one project; scope was checked by authenticate.
func (s *server) GetProject(c echo.Context, project string) error {
	p, err := s.cat.GetProject(c.Request().Context(), project)
	if errors.Is(err, catalog.ErrNotFound) {
		return projectNotFound(project)
	}
	if err != nil {
		return internalError(err)
	}
	return c.JSON(http.StatusOK, p)
}
