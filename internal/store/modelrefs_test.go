package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/runstate"
)

func registerVersions(t *testing.T, s *store.Store, project, model string, n int) {
	t.Helper()
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("%s-%s-%d", project, model, i)
		a := runstate.Artifact{ID: id, Name: "model", Type: "model", Digest: "sha256:" + id, Size: 1,
			Producer: runstate.ArtifactProducer{Run: "run-" + id, Step: "train", Attempt: 1}}
		if _, _, err := s.RegisterModelVersion(t.Context(), catalog.NewModelVersion{Project: project, Model: model, Artifact: a, Actor: "ci"}); err != nil {
			t.Fatal(err)
		}
	}
}

// A version an endpoint references cannot be deleted (the error names the
// endpoints), another tenant's references do not count, and once the
// endpoint's references are removed the version deletes.
func TestDeleteModelVersionRefusedWhileReferenced(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	registerVersions(t, s, "team-a", "sentiment", 2)
	registerVersions(t, s, "team-b", "sentiment", 1)
	for _, e := range []string{"web", "batch"} {
		if err := s.ReferenceModelVersion(ctx, "team-a", e, "sentiment", 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ReferenceModelVersion(ctx, "team-a", "web", "sentiment", 1); err != nil {
		t.Fatalf("a second reference is idempotent: %v", err)
	}
	if err := s.ReferenceModelVersion(ctx, "team-b", "web", "sentiment", 1); err != nil {
		t.Fatal(err)
	}

	err := s.DeleteModelVersion(ctx, "team-a", "sentiment", 1, "ci")
	var ref *catalog.VersionReferencedError
	if !errors.As(err, &ref) || !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("delete of a referenced version = %v, want a VersionReferencedError", err)
	}
	if fmt.Sprint(ref.Endpoints) != "[batch web]" {
		t.Fatalf("endpoints named = %v", ref.Endpoints)
	}
	if _, err := s.GetModelVersion(ctx, "team-a", "sentiment", "1"); err != nil {
		t.Fatalf("refused delete removed the version: %v", err)
	}
	if _, err := s.SetModelAlias(ctx, "team-a", "sentiment", "champion", 2, "ci"); err != nil {
		t.Fatal(err)
	}
	var named *catalog.VersionNamedError
	if err := s.DeleteModelVersion(ctx, "team-a", "sentiment", 2, "ci"); !errors.As(err, &named) {
		t.Fatalf("delete of a version an alias names = %v", err)
	}
	if err := s.DeleteModelAlias(ctx, "team-a", "sentiment", "champion", "ci"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteModelVersion(ctx, "team-a", "sentiment", 2, "ci"); err != nil {
		t.Fatalf("an unreferenced version deletes: %v", err)
	}

	refs, err := s.ModelReferences(ctx, "team-a", "sentiment")
	if err != nil || len(refs) != 2 {
		t.Fatalf("references of team-a = %v, %v; want 2 (team-b's are not listed)", refs, err)
	}

	// Rows reserved after the cut stay.
	if n, err := s.RemoveEndpointModelReferences(ctx, "team-a", "web", time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("remove before an hour ago = %d, %v; want 0", n, err)
	}
	for _, e := range []string{"web", "batch"} {
		if n, err := s.RemoveEndpointModelReferences(ctx, "team-a", e, time.Now().Add(time.Minute)); err != nil || n != 1 {
			t.Fatalf("remove %s = %d, %v; want 1", e, n, err)
		}
	}
	if err := s.DeleteModelVersion(ctx, "team-a", "sentiment", 1, "ci"); err != nil {
		t.Fatalf("delete once no endpoint references it: %v", err)
	}
	if err := s.DeleteModelVersion(ctx, "team-b", "sentiment", 1, "ci"); !errors.As(err, &ref) {
		t.Fatalf("team-b's version is still referenced by team-b's endpoint: %v", err)
	}
}

// A reference to a deleted version (or one that never existed) fails with
// ErrNotFound and records nothing.
func TestReferenceAfterDeleteFails(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	registerVersions(t, s, "team-a", "sentiment", 2)
	if err := s.DeleteModelVersion(ctx, "team-a", "sentiment", 1, "ci"); err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{1, 3} {
		if err := s.ReferenceModelVersion(ctx, "team-a", "web", "sentiment", v); !errors.Is(err, catalog.ErrNotFound) {
			t.Fatalf("reference to version %d = %v, want ErrNotFound", v, err)
		}
	}
	if err := s.ReferenceModelVersion(ctx, "team-b", "web", "sentiment", 2); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("reference to another project's version = %v, want ErrNotFound", err)
	}
	if refs, _ := s.ModelReferences(ctx, "team-a", "sentiment"); len(refs) != 0 {
		t.Fatalf("references recorded: %v", refs)
	}
}

// Reference and delete race on the same version many times: exactly one
// wins each time. Either the reference is recorded and the delete is
// refused, or the delete goes through and the reference fails; never a
// reference to a deleted version.
func TestReferenceAndDeleteSerialize(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	const n = 30
	registerVersions(t, s, "team-a", "race", n)
	for v := 1; v <= n; v++ {
		var refErr, delErr error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() { <-start; refErr = s.ReferenceModelVersion(ctx, "team-a", "web", "race", v) })
		wg.Go(func() { <-start; delErr = s.DeleteModelVersion(ctx, "team-a", "race", v, "ci") })
		close(start)
		wg.Wait()
		var ref *catalog.VersionReferencedError
		switch {
		case refErr == nil && errors.As(delErr, &ref):
		case delErr == nil && errors.Is(refErr, catalog.ErrNotFound):
		default:
			t.Fatalf("version %d: reference %v, delete %v: want exactly one to win", v, refErr, delErr)
		}
		_, gerr := s.GetModelVersion(ctx, "team-a", "race", fmt.Sprint(v))
		refs, _ := s.ModelReferences(ctx, "team-a", "race")
		referenced := false
		for _, r := range refs {
			referenced = referenced || r.Version == v
		}
		if referenced != (gerr == nil) {
			t.Fatalf("version %d: referenced %v but live %v", v, referenced, gerr == nil)
		}
	}
}

// The sweeper's listing pages through every project's references older
// than a time, in key order; a removal takes only a reference recorded
// before its cut.
func TestModelReferencesBeforePages(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	registerVersions(t, s, "team-a", "m", 2)
	registerVersions(t, s, "team-b", "m", 1)
	for _, r := range []struct {
		p, e string
		v    int
	}{{"team-a", "web", 2}, {"team-a", "batch", 1}, {"team-b", "web", 1}, {"team-a", "web", 1}} {
		if err := s.ReferenceModelVersion(ctx, r.p, r.e, "m", r.v); err != nil {
			t.Fatal(err)
		}
	}
	later := time.Now().Add(time.Minute)
	var got []string
	var after catalog.ModelVersionRef
	for {
		page, err := s.ModelReferencesBefore(ctx, later, after, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			got = append(got, fmt.Sprintf("%s/%s@%d", r.Project, r.Endpoint, r.Version))
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1]
	}
	if fmt.Sprint(got) != "[team-a/batch@1 team-a/web@1 team-a/web@2 team-b/web@1]" {
		t.Fatalf("pages %v", got)
	}
	if page, _ := s.ModelReferencesBefore(ctx, time.Now().Add(-time.Minute), catalog.ModelVersionRef{}, 10); len(page) != 0 {
		t.Fatalf("references recorded before a minute ago: %v", page)
	}
	r := catalog.ModelVersionRef{Project: "team-a", Endpoint: "web", Model: "m", Version: 1}
	if n, err := s.RemoveModelReference(ctx, r, time.Now().Add(-time.Minute)); err != nil || n != 0 {
		t.Fatalf("remove with a cut before it was recorded = %d, %v", n, err)
	}
	if n, err := s.RemoveModelReference(ctx, r, later); err != nil || n != 1 {
		t.Fatalf("remove = %d, %v", n, err)
	}
}
