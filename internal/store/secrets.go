package store

import (
	"context"
	"fmt"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// PutSecret creates or replaces a project's secret with its sealed value,
// and records who did it, in one transaction; created says which. An
// unknown project is ErrNotFound.
func (s *Store) PutSecret(ctx context.Context, project, name string, v secretbox.Sealed, actor string) (catalog.Secret, bool, error) {
	var out catalog.Secret
	var created bool
	err := s.withTx(ctx, func(q *db.Queries) error {
		row, err := q.PutSecret(ctx, db.PutSecretParams{Project: project, Name: name, KeyID: v.KeyID, DataKey: v.DataKey,
			Nonce: v.Nonce, Ciphertext: v.Ciphertext, UpdatedBy: actor})
		if err != nil {
			return err
		}
		out = secretOf(row.Project, row.Name, row.Version, row.CreatedAt, row.UpdatedAt, row.UpdatedBy)
		created = row.Created
		action := catalog.SecretReplaced
		if created {
			action = catalog.SecretCreated
		}
		return q.InsertSecretEvent(ctx, db.InsertSecretEventParams{Project: project, Name: name, Action: action, Actor: actor})
	})
	if err != nil {
		return catalog.Secret{}, false, mapErr(err, "put secret %s/%s", project, name)
	}
	return out, created, nil
}

// DeleteSecret deletes a project's secret (ErrNotFound when it has none of
// that name) and records who did it.
func (s *Store) DeleteSecret(ctx context.Context, project, name, actor string) error {
	err := s.withTx(ctx, func(q *db.Queries) error {
		n, err := q.DeleteSecret(ctx, db.DeleteSecretParams{Project: project, Name: name})
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("secret %s/%s: %w", project, name, catalog.ErrNotFound)
		}
		return q.InsertSecretEvent(ctx, db.InsertSecretEventParams{Project: project, Name: name, Action: catalog.SecretDeleted, Actor: actor})
	})
	return mapErr(err, "delete secret %s/%s", project, name)
}

// GetSecret returns what the catalogue shows of a secret.
func (s *Store) GetSecret(ctx context.Context, project, name string) (catalog.Secret, error) {
	r, err := s.q.GetSecretInfo(ctx, db.GetSecretInfoParams{Project: project, Name: name})
	if err != nil {
		return catalog.Secret{}, mapErr(err, "secret %s/%s", project, name)
	}
	return secretOf(r.Project, r.Name, r.Version, r.CreatedAt, r.UpdatedAt, r.UpdatedBy), nil
}

// ListSecrets returns a project's secrets by name.
func (s *Store) ListSecrets(ctx context.Context, project string) ([]catalog.Secret, error) {
	rows, err := s.q.ListSecrets(ctx, project)
	if err != nil {
		return nil, mapErr(err, "list secrets of %q", project)
	}
	out := make([]catalog.Secret, len(rows))
	for i, r := range rows {
		out[i] = secretOf(r.Project, r.Name, r.Version, r.CreatedAt, r.UpdatedAt, r.UpdatedBy)
	}
	return out, nil
}

// SealedSecrets returns the sealed values of the named secrets of a
// project, by name; a name the project has no secret of is absent.
func (s *Store) SealedSecrets(ctx context.Context, project string, names []string) (map[string]secretbox.Sealed, error) {
	rows, err := s.q.GetSealedSecrets(ctx, db.GetSealedSecretsParams{Project: project, Names: names})
	if err != nil {
		return nil, mapErr(err, "secrets of %q", project)
	}
	out := make(map[string]secretbox.Sealed, len(rows))
	for _, r := range rows {
		out[r.Name] = secretbox.Sealed{KeyID: r.KeyID, DataKey: r.DataKey, Nonce: r.Nonce, Ciphertext: r.Ciphertext}
	}
	return out, nil
}

// SealedSecret is a stored secret's sealed value, for key rotation.
type SealedSecret struct {
	Project, Name string
	Sealed        secretbox.Sealed
}

// SecretsToRewrap returns up to max secrets not sealed with currentKeyID.
func (s *Store) SecretsToRewrap(ctx context.Context, currentKeyID string, max int) ([]SealedSecret, error) {
	rows, err := s.q.ListSealedSecretsForRewrap(ctx, db.ListSealedSecretsForRewrapParams{CurrentKeyID: currentKeyID, MaxRows: int32(max)})
	if err != nil {
		return nil, mapErr(err, "secrets to rewrap")
	}
	out := make([]SealedSecret, len(rows))
	for i, r := range rows {
		out[i] = SealedSecret{Project: r.Project, Name: r.Name, Sealed: secretbox.Sealed{KeyID: r.KeyID, DataKey: r.DataKey, Nonce: r.Nonce, Ciphertext: r.Ciphertext}}
	}
	return out, nil
}

// RewrapSecret stores a secret's data key wrapped with a new key, unless
// the secret changed since oldKeyID was read (then it reports false).
func (s *Store) RewrapSecret(ctx context.Context, project, name, oldKeyID string, v secretbox.Sealed) (bool, error) {
	var done bool
	err := s.withTx(ctx, func(q *db.Queries) error {
		n, err := q.RewrapSecret(ctx, db.RewrapSecretParams{Project: project, Name: name, OldKeyID: oldKeyID, KeyID: v.KeyID, DataKey: v.DataKey})
		if err != nil || n == 0 {
			return err
		}
		done = true
		return q.InsertSecretEvent(ctx, db.InsertSecretEventParams{Project: project, Name: name, Action: catalog.SecretRewrapped, Actor: "key rotation"})
	})
	return done, mapErr(err, "rewrap secret %s/%s", project, name)
}

// ListSecretEvents returns a project's secrets audit, newest first.
func (s *Store) ListSecretEvents(ctx context.Context, project string, max int) ([]catalog.SecretEvent, error) {
	rows, err := s.q.ListSecretEvents(ctx, db.ListSecretEventsParams{Project: project, MaxRows: int32(max)})
	if err != nil {
		return nil, mapErr(err, "secret events of %q", project)
	}
	out := make([]catalog.SecretEvent, len(rows))
	for i, r := range rows {
		out[i] = catalog.SecretEvent{Name: r.Name, Action: r.Action, Actor: r.Actor, At: r.At}
	}
	return out, nil
}

// secretOf is a secret's row as the catalogue shows it (sqlc gives each
// query its own row type with these columns).
func secretOf(project, name string, version int32, created, updated time.Time, by string) catalog.Secret {
	return catalog.Secret{Project: project, Name: name, Version: int(version), CreatedAt: created, UpdatedAt: updated, UpdatedBy: by}
}
