package api

import (
	"context"
	"errors"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// TokenStore creates and revokes API tokens (lookup is TokenLookup).
type TokenStore interface {
	TokenLookup
	CreateToken(ctx context.Context, t catalog.Token, secretHash []byte) (catalog.Token, error)
	RevokeToken(ctx context.Context, id string) error
}

// CreateToken makes a project token. The secret exists only in this
// response; the catalogue keeps its hash.
func (s *server) CreateToken(ctx context.Context, req gen.CreateTokenRequestObject) (gen.CreateTokenResponseObject, error) {
	body := deref(req.Body)
	now := s.now().UTC()
	t := catalog.Token{
		ID:        s.newID(),
		Name:      body.Name,
		Project:   req.Project,
		Role:      tokens.Role(body.Role),
		CreatedAt: now,
	}
	if body.ExpiresInHours != nil {
		exp := now.Add(time.Duration(*body.ExpiresInHours) * time.Hour)
		t.ExpiresAt = &exp
	}
	secret, hash := tokens.New()
	created, err := s.cat.CreateToken(ctx, t, hash)
	if errors.Is(err, catalog.ErrConflict) {
		return nil, newProblem(ptAlreadyExists, "project %q already has a token named %q", req.Project, body.Name)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.CreateToken201JSONResponse{
		Body: gen.CreatedToken{Token: tokenView(created), Secret: secret},
		// The secret must not linger in caches or proxies.
		Headers: gen.CreateToken201ResponseHeaders{CacheControl: "no-store"},
	}, nil
}

// RevokeToken deletes a token by ID; it stops authenticating at once.
func (s *server) RevokeToken(ctx context.Context, req gen.RevokeTokenRequestObject) (gen.RevokeTokenResponseObject, error) {
	err := s.cat.RevokeToken(ctx, req.Token)
	s.tokens.forget(req.Token) // at once on this gateway; others within their cache TTL
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("token %s not found", req.Token)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.RevokeToken204Response{}, nil
}

// Whoami answers the token the request carries: its name, role and
// project, so a client can offer only what the role allows.
func (s *server) Whoami(ctx context.Context, _ gen.WhoamiRequestObject) (gen.WhoamiResponseObject, error) {
	return gen.Whoami200JSONResponse(tokenView(principal(ctx))), nil
}
