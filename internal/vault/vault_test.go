package vault_test

import (
	"context"
	"errors"
	"testing"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/internal/vault"
)

func newStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a", "b"} {
		if _, err := s.CreateProject(t.Context(), catalog.Project{Name: p}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func newBox(t *testing.T, old ...string) (*secretbox.Box, string) {
	t.Helper()
	u, err := secretbox.NewLocalKeyURL()
	if err != nil {
		t.Fatal(err)
	}
	b, err := secretbox.Open(t.Context(), u, old...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, u
}

// On Postgres: put, replace, resolve, tenancy, audit, delete.
func TestVaultOnPostgres(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	box, _ := newBox(t)
	v := vault.New(s, box)

	sec, created, err := v.Put(ctx, "a", "db", []byte("one"), "alice")
	if err != nil || !created || sec.Version != 1 {
		t.Fatalf("Put = %+v, %v, %v", sec, created, err)
	}
	sec, created, err = v.Put(ctx, "a", "db", []byte("two"), "bob")
	if err != nil || created || sec.Version != 2 || sec.UpdatedBy != "bob" {
		t.Fatalf("replace = %+v, %v, %v", sec, created, err)
	}
	if _, _, err := v.Put(ctx, "nope", "db", []byte("x"), "bob"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("Put in an unknown project: %v", err)
	}
	got, err := v.Resolve(ctx, "a", []string{"db", "db"})
	if err != nil || got["db"] != "two" {
		t.Fatalf("Resolve = %v, %v", got, err)
	}
	// Another project has no such secret; a missing one is named.
	if _, err := v.Resolve(ctx, "b", []string{"db", "other"}); !errors.Is(err, catalog.ErrNotFound) || err.Error() != `project "b" has no secret "db", "other": not found` {
		t.Fatalf("Resolve in b: %v", err)
	}
	if _, err := v.Get(ctx, "b", "db"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("Get in b: %v", err)
	}
	// A row copied into another project does not open there.
	sealed, err := s.SealedSecrets(ctx, "a", []string{"db"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutSecret(ctx, "b", "db", sealed["db"], "mallory"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Resolve(ctx, "b", []string{"db"}); err == nil {
		t.Fatal("a sealed value copied to another project opened")
	}
	if err := v.Delete(ctx, "a", "db", "carol"); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, "a", "db", "carol"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	events, err := v.Events(ctx, "a", 10)
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, e := range events {
		actions = append(actions, e.Action+" by "+e.Actor)
	}
	if want := "[deleted by carol replaced by bob created by alice]"; fmtList(actions) != want {
		t.Fatalf("audit %v, want %s", actions, want)
	}
}

// Rotation: values sealed with the old key open with old+new, Rotate
// moves them to the new key, and then the new key alone opens them.
func TestVaultRotation(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	oldBox, oldURL := newBox(t)
	for _, n := range []string{"k1", "k2", "k3"} {
		if _, _, err := vault.New(s, oldBox).Put(ctx, "a", n, []byte("v-"+n), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	both, newURL := newBox(t, oldURL)
	v := vault.New(s, both)
	n, err := v.Rotate(ctx)
	if err != nil || n != 3 {
		t.Fatalf("Rotate = %d, %v", n, err)
	}
	if n, _ := v.Rotate(ctx); n != 0 {
		t.Fatalf("second Rotate rewrapped %d", n)
	}
	alone, err := secretbox.Open(ctx, newURL)
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	got, err := vault.New(s, alone).Resolve(ctx, "a", []string{"k1", "k2", "k3"})
	if err != nil || got["k3"] != "v-k3" {
		t.Fatalf("after rotation, the new key alone: %v, %v", got, err)
	}
}

func fmtList(s []string) string {
	out := "["
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out + "]"
}
