package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/tokens"
)

// TokenStore creates and revokes API tokens (lookup is TokenLookup).
type TokenStore interface {
	TokenLookup
	CreateToken(ctx context.Context, t catalog.Token, secretHash []byte) (catalog.Token, error)
	RevokeToken(ctx context.Context, id string) error
}

// CreateToken makes a project token. The secret exists only in this
// response; the catalogue keeps its hash.
func (s *server) CreateToken(c echo.Context, project string) error {
	var req gen.CreateTokenRequest
	if err := decodeJSON(c, &req, false); err != nil {
		return err
	}
	now := s.now().UTC()
	t := catalog.Token{
		ID:        s.newID(),
		Name:      req.Name,
		Project:   project,
		Role:      catalog.Role(req.Role),
		CreatedAt: now,
	}
	if req.ExpiresInHours != nil {
		exp := now.Add(time.Duration(*req.ExpiresInHours) * time.Hour)
		t.ExpiresAt = &exp
	}
	secret, hash := tokens.New()
	created, err := s.cat.CreateToken(c.Request().Context(), t, hash)
	if errors.Is(err, catalog.ErrConflict) {
		return newProblem(ptAlreadyExists, "project %q already has a token named %q", project, req.Name)
	}
	if err != nil {
		return internalError(err)
	}
	// The secret must not linger in caches or proxies.
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, gen.CreatedToken{Token: created, Secret: secret})
}

// RevokeToken deletes a token by ID; it stops authenticating at once.
func (s *server) RevokeToken(c echo.Context, id string) error {
	err := s.cat.RevokeToken(c.Request().Context(), id)
	if errors.Is(err, catalog.ErrNotFound) {
		return notFound("token %s not found", id)
	}
	if err != nil {
		return internalError(err)
	}
	return c.NoContent(http.StatusNoContent)
}
