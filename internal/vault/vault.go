package vault

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/store"
)

// Store is what the vault needs of the catalogue (the Postgres store).
type Store interface {
	PutSecret(ctx context.Context, project, name string, v secretbox.Sealed, actor string) (catalog.Secret, bool, error)
	DeleteSecret(ctx context.Context, project, name, actor string) error
	GetSecret(ctx context.Context, project, name string) (catalog.Secret, error)
	ListSecrets(ctx context.Context, project string) ([]catalog.Secret, error)
	ListSecretEvents(ctx context.Context, project string, max int) ([]catalog.SecretEvent, error)
	SealedSecrets(ctx context.Context, project string, names []string) (map[string]secretbox.Sealed, error)
	SecretsToRewrap(ctx context.Context, currentKeyID string, max int) ([]store.SealedSecret, error)
	RewrapSecret(ctx context.Context, project, name, oldKeyID string, v secretbox.Sealed) (bool, error)
}

var _ Store = (*store.Store)(nil)

// Vault seals, stores and opens project secrets.
type Vault struct {
	store Store
	box   *secretbox.Box
}

// New returns a vault over store sealing with box.
func New(s Store, box *secretbox.Box) *Vault { return &Vault{store: s, box: box} }

func owner(project, name string) string { return project + "/" + name }

// Put seals value and stores it as the project's secret name; created is
// false when it replaced one.
func (v *Vault) Put(ctx context.Context, project, name string, value []byte, actor string) (catalog.Secret, bool, error) {
	sealed, err := v.box.Seal(ctx, value, owner(project, name))
	if err != nil {
		return catalog.Secret{}, false, err
	}
	return v.store.PutSecret(ctx, project, name, sealed, actor)
}

// Delete deletes a secret (catalog.ErrNotFound when there is none).
func (v *Vault) Delete(ctx context.Context, project, name, actor string) error {
	return v.store.DeleteSecret(ctx, project, name, actor)
}

// Get returns a secret's metadata, never its value.
func (v *Vault) Get(ctx context.Context, project, name string) (catalog.Secret, error) {
	return v.store.GetSecret(ctx, project, name)
}

// List returns a project's secrets' metadata, by name.
func (v *Vault) List(ctx context.Context, project string) ([]catalog.Secret, error) {
	return v.store.ListSecrets(ctx, project)
}

// Events returns the project's secrets audit, newest first.
func (v *Vault) Events(ctx context.Context, project string, max int) ([]catalog.SecretEvent, error) {
	return v.store.ListSecretEvents(ctx, project, max)
}

// Resolve opens the named secrets of project, by name. Names the project
// has no secret of are a catalog.ErrNotFound naming them all.
func (v *Vault) Resolve(ctx context.Context, project string, names []string) (map[string]string, error) {
	sealed, err := v.store.SealedSecrets(ctx, project, names)
	if err != nil {
		return nil, err
	}
	var missing []string
	out := make(map[string]string, len(names))
	for _, n := range names {
		s, ok := sealed[n]
		if !ok {
			if !slices.Contains(missing, n) {
				missing = append(missing, n)
			}
			continue
		}
		val, err := v.box.Open(ctx, s, owner(project, n))
		if err != nil {
			return nil, fmt.Errorf("secret %q of project %q: %w", n, project, err)
		}
		out[n] = string(val)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("project %q has no secret %s: %w", project, strings.Join(quoteAll(missing), ", "), catalog.ErrNotFound)
	}
	return out, nil
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = fmt.Sprintf("%q", v)
	}
	return out
}

// Rotate rewraps every secret not sealed with the current key, and says
// how many it rewrapped. A secret replaced meanwhile is left as written.
func (v *Vault) Rotate(ctx context.Context) (int, error) {
	n := 0
	for {
		page, err := v.store.SecretsToRewrap(ctx, v.box.KeyID(), 500)
		if err != nil {
			return n, err
		}
		if len(page) == 0 {
			return n, nil
		}
		progressed := false
		for _, s := range page {
			r, changed, err := v.box.Rewrap(ctx, s.Sealed)
			if err != nil {
				return n, fmt.Errorf("secret %q of project %q: %w", s.Name, s.Project, err)
			}
			if !changed {
				continue
			}
			ok, err := v.store.RewrapSecret(ctx, s.Project, s.Name, s.Sealed.KeyID, r)
			if err != nil {
				return n, err
			}
			if ok {
				n++
				progressed = true
			}
		}
		if !progressed {
			return n, nil
		}
	}
}
