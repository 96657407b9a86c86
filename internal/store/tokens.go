package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// CreateToken stores a token whose secret hashes (SHA-256) to secretHash.
// An empty t.ID is generated; CreatedAt is set by the database. Admin tokens
// have no project, other roles exactly one (catalog.ErrInvalidArgument otherwise);
// an unknown project is ErrNotFound, a reused ID or secret ErrConflict.
func (s *Store) CreateToken(ctx context.Context, t catalog.Token, secretHash []byte) (catalog.Token, error) {
	switch t.Role {
	case tokens.RoleAdmin:
		if t.Project != "" {
			return catalog.Token{}, invalid("admin tokens are not bound to a project")
		}
	case tokens.RoleEditor, tokens.RoleViewer:
		if t.Project == "" {
			return catalog.Token{}, invalid("%s tokens need a project", t.Role)
		}
	default:
		return catalog.Token{}, invalid("unknown role %q", t.Role)
	}
	if len(secretHash) == 0 {
		return catalog.Token{}, invalid("empty secret hash")
	}
	if t.ID == "" {
		t.ID = newID("tok_")
	}
	row, err := s.q.CreateToken(ctx, db.CreateTokenParams{
		ID:         t.ID,
		Name:       t.Name,
		Project:    strPtr(t.Project),
		Role:       string(t.Role),
		SecretHash: secretHash,
		ExpiresAt:  t.ExpiresAt,
	})
	if err != nil {
		return catalog.Token{}, mapErr(err, "create token %q", t.Name)
	}
	return toToken(row), nil
}

// TokenBySecretHash returns the live token with that secret hash;
// ErrNotFound if there is none or it is revoked or expired.
func (s *Store) TokenBySecretHash(ctx context.Context, hash []byte) (catalog.Token, error) {
	row, err := s.q.TokenBySecretHash(ctx, hash)
	if err != nil {
		return catalog.Token{}, mapErr(err, "token")
	}
	return toToken(row), nil
}

// RevokeToken revokes a token (idempotently); ErrNotFound if no such ID.
func (s *Store) RevokeToken(ctx context.Context, id string) error {
	n, err := s.q.RevokeToken(ctx, id)
	if err != nil {
		return mapErr(err, "revoke token %q", id)
	}
	if n == 0 {
		return mapErr(catalog.ErrNotFound, "revoke token %q", id)
	}
	return nil
}

// EnsureAdminToken makes secretHash a live admin token named name, creating
// it if needed and clearing any revocation or expiry: the dev stack's
// idempotent bootstrap. The token's ID is derived from the hash.
func (s *Store) EnsureAdminToken(ctx context.Context, name string, secretHash []byte) error {
	if len(secretHash) == 0 {
		return invalid("empty secret hash")
	}
	sum := sha256.Sum256(secretHash)
	err := s.q.EnsureAdminToken(ctx, db.EnsureAdminTokenParams{
		ID:         "tok_admin_" + hex.EncodeToString(sum[:8]),
		Name:       name,
		SecretHash: secretHash,
	})
	return mapErr(err, "ensure admin token %q", name)
}

func toToken(r db.Token) catalog.Token {
	return catalog.Token{
		ID:        r.ID,
		Name:      r.Name,
		Project:   deref(r.Project),
		Role:      tokens.Role(r.Role),
		CreatedAt: utc(r.CreatedAt),
		ExpiresAt: utcPtr(r.ExpiresAt),
	}
}
