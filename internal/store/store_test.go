package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// newStore opens a migrated store on a fresh database.
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
	return s
}

func mustProject(t *testing.T, s *store.Store, name string) {
	t.Helper()
	if _, err := s.CreateProject(t.Context(), catalog.Project{Name: name}); err != nil {
		t.Fatal(err)
	}
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("got error %v, want %v", err, target)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		t.Fatalf("driver error leaked: %#v", err)
	}
}

func hash(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

func TestMigrate(t *testing.T) {
	url := storetest.NewDatabase(t)
	ctx := t.Context()

	// Several processes starting at once: the advisory lock serialises them.
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			s, err := store.Open(ctx, url)
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			errs[i] = s.Migrate(ctx)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	s, err := store.Open(ctx, url, store.WithMaxConns(2), store.WithApplicationName("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 2 { // idempotent
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestOpenBadURL(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := store.Open(ctx, "postgres://nobody@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"); err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
	if _, err := store.Open(ctx, "::not a url"); err == nil {
		t.Fatal("Open of a bad URL succeeded")
	}
}

func TestProjects(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()

	p, err := s.CreateProject(ctx, catalog.Project{Name: "beta", Description: "second"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "beta" || p.Description != "second" || p.CreatedAt.IsZero() {
		t.Fatalf("created %+v", p)
	}
	mustProject(t, s, "alpha")
	_, err = s.CreateProject(ctx, catalog.Project{Name: "beta"})
	wantErr(t, err, catalog.ErrConflict)
	_, err = s.CreateProject(ctx, catalog.Project{})
	wantErr(t, err, catalog.ErrInvalidArgument)

	got, err := s.GetProject(ctx, "beta")
	if err != nil || got != p {
		t.Fatalf("GetProject = %+v, %v; want %+v", got, err, p)
	}
	_, err = s.GetProject(ctx, "gamma")
	wantErr(t, err, catalog.ErrNotFound)

	list, err := s.ListProjects(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "alpha" || list[1].Name != "beta" {
		t.Fatalf("ListProjects = %+v", list)
	}
}

func TestTokens(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p1")

	tok, err := s.CreateToken(ctx, catalog.Token{Name: "ci", Project: "p1", Role: tokens.RoleEditor}, hash("s1"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.ID == "" || tok.Project != "p1" || tok.Role != tokens.RoleEditor || tok.CreatedAt.IsZero() || tok.ExpiresAt != nil {
		t.Fatalf("created %+v", tok)
	}
	got, err := s.TokenBySecretHash(ctx, hash("s1"))
	if err != nil || got != tok {
		t.Fatalf("TokenBySecretHash = %+v, %v; want %+v", got, err, tok)
	}
	_, err = s.TokenBySecretHash(ctx, hash("nope"))
	wantErr(t, err, catalog.ErrNotFound)

	// Validation, conflicts, unknown project.
	_, err = s.CreateToken(ctx, catalog.Token{Name: "x", Project: "p1", Role: tokens.RoleAdmin}, hash("s2"))
	wantErr(t, err, catalog.ErrInvalidArgument)
	_, err = s.CreateToken(ctx, catalog.Token{Name: "x", Role: tokens.RoleViewer}, hash("s2"))
	wantErr(t, err, catalog.ErrInvalidArgument)
	_, err = s.CreateToken(ctx, catalog.Token{Name: "x", Project: "p1", Role: "owner"}, hash("s2"))
	wantErr(t, err, catalog.ErrInvalidArgument)
	_, err = s.CreateToken(ctx, catalog.Token{Name: "x", Project: "nope", Role: tokens.RoleViewer}, hash("s2"))
	wantErr(t, err, catalog.ErrNotFound)
	_, err = s.CreateToken(ctx, catalog.Token{Name: "dup", Project: "p1", Role: tokens.RoleViewer}, hash("s1"))
	wantErr(t, err, catalog.ErrConflict)
	_, err = s.CreateToken(ctx, catalog.Token{ID: tok.ID, Name: "dup", Project: "p1", Role: tokens.RoleViewer}, hash("s3"))
	wantErr(t, err, catalog.ErrConflict)

	// Expiry.
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	if _, err := s.CreateToken(ctx, catalog.Token{Name: "old", Project: "p1", Role: tokens.RoleViewer, ExpiresAt: &past}, hash("old")); err != nil {
		t.Fatal(err)
	}
	_, err = s.TokenBySecretHash(ctx, hash("old"))
	wantErr(t, err, catalog.ErrNotFound)
	fresh, err := s.CreateToken(ctx, catalog.Token{Name: "new", Project: "p1", Role: tokens.RoleViewer, ExpiresAt: &future}, hash("new"))
	if err != nil {
		t.Fatal(err)
	}
	if fresh.ExpiresAt == nil || !fresh.ExpiresAt.Equal(future.Truncate(time.Microsecond)) {
		t.Fatalf("ExpiresAt = %v, want %v", fresh.ExpiresAt, future)
	}
	if _, err := s.TokenBySecretHash(ctx, hash("new")); err != nil {
		t.Fatal(err)
	}

	// Revocation, idempotent.
	for range 2 {
		if err := s.RevokeToken(ctx, tok.ID); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.TokenBySecretHash(ctx, hash("s1"))
	wantErr(t, err, catalog.ErrNotFound)
	wantErr(t, s.RevokeToken(ctx, "tok_missing"), catalog.ErrNotFound)

	// Bootstrap admin: idempotent, and revives a revoked admin secret.
	for range 2 {
		if err := s.EnsureAdminToken(ctx, "devstack", hash("admin")); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := s.TokenBySecretHash(ctx, hash("admin"))
	if err != nil {
		t.Fatal(err)
	}
	if admin.Role != tokens.RoleAdmin || admin.Project != "" || admin.Name != "devstack" {
		t.Fatalf("admin token %+v", admin)
	}
	if err := s.RevokeToken(ctx, admin.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureAdminToken(ctx, "devstack", hash("admin")); err != nil {
		t.Fatal(err)
	}
	again, err := s.TokenBySecretHash(ctx, hash("admin"))
	if err != nil || again.ID != admin.ID {
		t.Fatalf("after re-ensure: %+v, %v", again, err)
	}
	wantErr(t, s.EnsureAdminToken(ctx, "x", nil), catalog.ErrInvalidArgument)
}

func TestPipelineVersions(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()

	spec1 := json.RawMessage(`{"name":"train",  "steps":[{"b":1,"a":2}]}`) // odd spacing kept verbatim
	_, _, err := s.CreatePipelineVersion(ctx, "nope", "train", spec1, "d1", "alice")
	wantErr(t, err, catalog.ErrNotFound)
	mustProject(t, s, "p1")

	v1, created, err := s.CreatePipelineVersion(ctx, "p1", "train", spec1, "d1", "alice")
	if err != nil || !created {
		t.Fatalf("v1: %+v %v %v", v1, created, err)
	}
	if v1.Version != 1 || !bytes.Equal(v1.Spec, spec1) || v1.Digest != "d1" || v1.CreatedBy != "alice" || v1.Project != "p1" || v1.Pipeline != "train" {
		t.Fatalf("v1 = %+v", v1)
	}
	same, created, err := s.CreatePipelineVersion(ctx, "p1", "train", spec1, "d1", "bob")
	if err != nil || created || same.Version != 1 || same.CreatedBy != "alice" {
		t.Fatalf("same digest: %+v %v %v", same, created, err)
	}
	v2, created, err := s.CreatePipelineVersion(ctx, "p1", "train", json.RawMessage(`{"v":2}`), "d2", "bob")
	if err != nil || !created || v2.Version != 2 {
		t.Fatalf("v2: %+v %v %v", v2, created, err)
	}
	// An older digest is a new version: only the newest is compared.
	v3, created, err := s.CreatePipelineVersion(ctx, "p1", "train", spec1, "d1", "carol")
	if err != nil || !created || v3.Version != 3 {
		t.Fatalf("v3: %+v %v %v", v3, created, err)
	}
	if _, _, err := s.CreatePipelineVersion(ctx, "p1", "eval", json.RawMessage(`{}`), "e1", ""); err != nil {
		t.Fatal(err)
	}
	_, _, err = s.CreatePipelineVersion(ctx, "p1", "bad", json.RawMessage(`{`), "x", "")
	wantErr(t, err, catalog.ErrInvalidArgument)

	p, err := s.GetPipeline(ctx, "p1", "train")
	if err != nil || p.LatestVersion != 3 || p.UpdatedAt.Before(p.CreatedAt) {
		t.Fatalf("GetPipeline = %+v, %v", p, err)
	}
	_, err = s.GetPipeline(ctx, "p1", "bad")
	wantErr(t, err, catalog.ErrNotFound)
	list, err := s.ListPipelines(ctx, "p1")
	if err != nil || len(list) != 2 || list[0].Name != "eval" || list[1].Name != "train" {
		t.Fatalf("ListPipelines = %+v, %v", list, err)
	}
	if other, err := s.ListPipelines(ctx, "p2"); err != nil || len(other) != 0 {
		t.Fatalf("ListPipelines(p2) = %+v, %v", other, err)
	}

	latest, err := s.GetPipelineVersion(ctx, "p1", "train", 0)
	if err != nil || latest.Version != 3 {
		t.Fatalf("latest = %+v, %v", latest, err)
	}
	got, err := s.GetPipelineVersion(ctx, "p1", "train", 2)
	if err != nil || got.Version != 2 || string(got.Spec) != `{"v":2}` {
		t.Fatalf("version 2 = %+v, %v", got, err)
	}
	for _, v := range []int{4, 0} {
		_, err = s.GetPipelineVersion(ctx, "p1", "nope", v)
		wantErr(t, err, catalog.ErrNotFound)
	}
	_, err = s.GetPipelineVersion(ctx, "p1", "train", 4)
	wantErr(t, err, catalog.ErrNotFound)
	_, err = s.GetPipelineVersion(ctx, "p1", "train", -1)
	wantErr(t, err, catalog.ErrInvalidArgument)
}

func TestConcurrentPipelineVersions(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p1")

	const n = 8
	versions := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			spec := json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))
			v, created, err := s.CreatePipelineVersion(ctx, "p1", "train", spec, fmt.Sprintf("d%d", i), "")
			if err == nil && !created {
				err = errors.New("not created")
			}
			versions[i], errs[i] = v.Version, err
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(versions)
	if !slices.Equal(versions, []int{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("versions = %v", versions)
	}
	p, err := s.GetPipeline(ctx, "p1", "train")
	if err != nil || p.LatestVersion != n {
		t.Fatalf("GetPipeline = %+v, %v", p, err)
	}
}

func TestCreateRun(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()

	status := &runstate.Status{RunID: "r1", Project: "p1", State: runstate.Pending, Steps: []runstate.StepStatus{}}
	in := catalog.Run{
		ID: "r1", Project: "p1", Pipeline: "train", Version: 2, Workflow: runstate.PipelineWorkflowName,
		State:     runstate.Running, // ignored: new runs are PENDING
		CreatedBy: "alice", IdempotencyKey: "k1", RequestHash: "h1",
		Input: json.RawMessage(`{"params":{"lr":0.1}}`), Status: status,
	}
	r, created, err := s.CreateRun(ctx, in)
	if err != nil || !created {
		t.Fatalf("CreateRun = %v, %v", created, err)
	}
	if r.ID != "r1" || r.State != runstate.Pending || r.Pipeline != "train" || r.Version != 2 ||
		r.CreatedBy != "alice" || r.IdempotencyKey != "k1" || r.RequestHash != "h1" || r.CreatedAt.IsZero() ||
		r.Status == nil || r.Status.RunID != "r1" {
		t.Fatalf("created %+v", r)
	}
	var input map[string]any
	if err := json.Unmarshal(r.Input, &input); err != nil || input["params"] == nil {
		t.Fatalf("input %s: %v", r.Input, err)
	}

	// Same key: the existing run, whatever the new ID and hash.
	again, created, err := s.CreateRun(ctx, catalog.Run{ID: "r2", Project: "p1", Workflow: "w", IdempotencyKey: "k1", RequestHash: "h2"})
	if err != nil || created || again.ID != "r1" || again.RequestHash != "h1" {
		t.Fatalf("idempotent CreateRun = %+v, %v, %v", again, created, err)
	}
	// The key is per project.
	if _, created, err := s.CreateRun(ctx, catalog.Run{ID: "r3", Project: "p2", Workflow: "w", IdempotencyKey: "k1"}); err != nil || !created {
		t.Fatalf("other project, same key: %v, %v", created, err)
	}
	// No key: a taken ID is a conflict.
	_, _, err = s.CreateRun(ctx, catalog.Run{ID: "r1", Project: "p1", Workflow: "w"})
	wantErr(t, err, catalog.ErrConflict)
	// Minimal run: generated ID, no pipeline, no status.
	minimal, created, err := s.CreateRun(ctx, catalog.Run{Project: "p1", Workflow: "go.Train"})
	if err != nil || !created || minimal.ID == "" || minimal.Pipeline != "" || minimal.Version != 0 || minimal.Status != nil || minimal.Input != nil {
		t.Fatalf("minimal run %+v, %v, %v", minimal, created, err)
	}
	_, _, err = s.CreateRun(ctx, catalog.Run{Workflow: "w"})
	wantErr(t, err, catalog.ErrInvalidArgument)

	// Concurrent starts with one key: exactly one creates.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	createdCount := 0
	for i := range 8 {
		wg.Go(func() {
			r, created, err := s.CreateRun(ctx, catalog.Run{ID: fmt.Sprintf("c%d", i), Project: "p1", Workflow: "w", IdempotencyKey: "kc"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Error(err)
				return
			}
			ids = append(ids, r.ID)
			if created {
				createdCount++
			}
		})
	}
	wg.Wait()
	if createdCount != 1 || len(ids) != 8 || len(slices.Compact(slices.Sorted(slices.Values(ids)))) != 1 {
		t.Fatalf("concurrent idempotent creates: created %d, ids %v", createdCount, ids)
	}

	// Tenant isolation and deletion.
	if _, err := s.GetRun(ctx, "p1", "r1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetRun(ctx, "p2", "r1")
	wantErr(t, err, catalog.ErrNotFound)
	_, err = s.GetRun(ctx, "p1", "nope")
	wantErr(t, err, catalog.ErrNotFound)
	if err := s.DeleteRun(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	_, err = s.GetRun(ctx, "p1", "r1")
	wantErr(t, err, catalog.ErrNotFound)
	wantErr(t, s.DeleteRun(ctx, "r1"), catalog.ErrNotFound)
	// The key is free again after deletion.
	if _, created, err := s.CreateRun(ctx, catalog.Run{ID: "r4", Project: "p1", Workflow: "w", IdempotencyKey: "k1"}); err != nil || !created {
		t.Fatalf("key after delete: %v, %v", created, err)
	}
}

func TestListRuns(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()

	// 120 runs in p1, two share each timestamp so ties are broken by ID;
	// plus noise in p2 that must never show up.
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	states := []runstate.State{runstate.Pending, runstate.Succeeded, runstate.Failed}
	type key struct {
		at       time.Time
		id       string
		pipeline string
		state    runstate.State
		by       string
		schedule string // a scheduled run's row is the mirror's: only mirrored ones have one
	}
	var all []key
	for i := range 120 {
		k := key{
			at:       base.Add(time.Duration(i/2) * time.Second),
			id:       fmt.Sprintf("run%03d", (i*37)%120), // IDs not in time order
			pipeline: []string{"train", "eval"}[i%2],
			state:    states[i%3],
			by:       []string{"ci", "alice", "", "bob"}[i%4],
			schedule: []string{"nightly", "", "hourly", "", ""}[i%5],
		}
		if k.state == runstate.Pending {
			k.schedule = ""
		}
		all = append(all, k)
		if _, _, err := s.CreateRun(ctx, catalog.Run{ID: k.id, Project: "p1", Pipeline: k.pipeline, Workflow: "w", CreatedAt: k.at, CreatedBy: k.by}); err != nil {
			t.Fatal(err)
		}
		if k.state != runstate.Pending {
			if err := s.MirrorRun(ctx, runstate.Status{RunID: k.id, Project: "p1", Pipeline: k.pipeline, Workflow: "w", State: k.state, Seq: 1, ScheduleID: k.schedule}); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := s.CreateRun(ctx, catalog.Run{ID: "other" + k.id, Project: "p2", Pipeline: k.pipeline, Workflow: "w", CreatedAt: k.at}); err != nil {
			t.Fatal(err)
		}
	}
	slices.SortFunc(all, func(a, b key) int {
		if c := b.at.Compare(a.at); c != 0 {
			return c
		}
		return bytes.Compare([]byte(b.id), []byte(a.id))
	})

	after, before := base.Add(10*time.Second), base.Add(50*time.Second)
	cases := []struct {
		name   string
		filter catalog.RunFilter
		keep   func(key) bool
	}{
		{"all", catalog.RunFilter{}, func(key) bool { return true }},
		{"pipeline", catalog.RunFilter{Pipeline: "eval"}, func(k key) bool { return k.pipeline == "eval" }},
		{"state", catalog.RunFilter{State: runstate.Failed}, func(k key) bool { return k.state == runstate.Failed }},
		{"pipeline+state", catalog.RunFilter{Pipeline: "train", State: runstate.Succeeded},
			func(k key) bool { return k.pipeline == "train" && k.state == runstate.Succeeded }},
		{"range", catalog.RunFilter{CreatedAfter: &after, CreatedBefore: &before},
			func(k key) bool { return !k.at.Before(after) && k.at.Before(before) }},
		{"range+state", catalog.RunFilter{State: runstate.Pending, CreatedAfter: &after},
			func(k key) bool { return k.state == runstate.Pending && !k.at.Before(after) }},
		{"range+pipeline", catalog.RunFilter{Pipeline: "train", CreatedBefore: &before},
			func(k key) bool { return k.pipeline == "train" && k.at.Before(before) }},
		{"creator", catalog.RunFilter{CreatedBy: "ci"}, func(k key) bool { return k.by == "ci" }},
		{"creator+state", catalog.RunFilter{CreatedBy: "alice", State: runstate.Succeeded},
			func(k key) bool { return k.by == "alice" && k.state == runstate.Succeeded }},
		{"creator+pipeline", catalog.RunFilter{CreatedBy: "bob", Pipeline: "eval"},
			func(k key) bool { return k.by == "bob" && k.pipeline == "eval" }},
		{"creator+pipeline+state+range", catalog.RunFilter{CreatedBy: "ci", Pipeline: "train", State: runstate.Failed, CreatedAfter: &after, CreatedBefore: &before},
			func(k key) bool {
				return k.by == "ci" && k.pipeline == "train" && k.state == runstate.Failed && !k.at.Before(after) && k.at.Before(before)
			}},
		{"none", catalog.RunFilter{Pipeline: "nope"}, func(key) bool { return false }},
		{"nobody", catalog.RunFilter{CreatedBy: "nobody"}, func(key) bool { return false }},
		{"schedule", catalog.RunFilter{Schedule: "nightly"}, func(k key) bool { return k.schedule == "nightly" }},
		{"schedule+state", catalog.RunFilter{Schedule: "hourly", State: runstate.Failed},
			func(k key) bool { return k.schedule == "hourly" && k.state == runstate.Failed }},
		{"schedule+pipeline+creator+range", catalog.RunFilter{Schedule: "nightly", Pipeline: "train", CreatedBy: "ci", CreatedAfter: &after},
			func(k key) bool {
				return k.schedule == "nightly" && k.pipeline == "train" && k.by == "ci" && !k.at.Before(after)
			}},
		{"no such schedule", catalog.RunFilter{Schedule: "weekly"}, func(key) bool { return false }},
	}
	for _, tc := range cases {
		for _, limit := range []int{7, 1000} {
			t.Run(fmt.Sprintf("%s/limit%d", tc.name, limit), func(t *testing.T) {
				var want []string
				for _, k := range all {
					if tc.keep(k) {
						want = append(want, k.id)
					}
				}
				f := tc.filter
				f.Project, f.Limit = "p1", limit
				var got []string
				pages := 0
				for {
					page, err := s.ListRuns(ctx, f)
					if err != nil {
						t.Fatal(err)
					}
					pages++
					if len(page.Runs) > limit {
						t.Fatalf("page of %d runs, limit %d", len(page.Runs), limit)
					}
					for _, r := range page.Runs {
						if r.Project != "p1" {
							t.Fatalf("run of project %q", r.Project)
						}
						got = append(got, r.ID)
					}
					if page.NextPageToken == "" {
						break
					}
					if pages > 200 {
						t.Fatal("pagination does not end")
					}
					f.PageToken = page.NextPageToken
				}
				if !slices.Equal(got, want) {
					t.Fatalf("walked %d runs %v\nwant %d runs %v", len(got), got, len(want), want)
				}
			})
		}
	}

	// Default page size; listed runs carry the mirrored state but not the
	// status document (GetRun has it); bad tokens.
	page, err := s.ListRuns(ctx, catalog.RunFilter{Project: "p1"})
	if err != nil || len(page.Runs) != store.DefaultRunPageSize || page.NextPageToken == "" {
		t.Fatalf("default page: %d runs, %v", len(page.Runs), err)
	}
	for _, r := range page.Runs {
		full, err := s.GetRun(ctx, "p1", r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != nil || r.State != full.State || r.CreatedBy != full.CreatedBy || r.Pipeline != full.Pipeline || !r.CreatedAt.Equal(full.CreatedAt) {
			t.Fatalf("listed run %+v, stored %+v", r, full)
		}
		if r.State != runstate.Pending && (full.Status == nil || full.Status.State != r.State) {
			t.Fatalf("run %s: state %s, status %+v", r.ID, r.State, full.Status)
		}
	}
	for _, tok := range []string{"!!!", "e30", "bm90IGpzb24"} {
		_, err = s.ListRuns(ctx, catalog.RunFilter{Project: "p1", PageToken: tok})
		wantErr(t, err, store.ErrBadPageToken)
		wantErr(t, err, catalog.ErrInvalidArgument)
	}
	// A token is bound to its project and filter.
	for _, f := range []catalog.RunFilter{
		{Project: "p2"},
		{Project: "p1", Pipeline: "train"},
		{Project: "p1", State: runstate.Failed},
		{Project: "p1", CreatedAfter: &after},
		{Project: "p1", CreatedBy: "ci"},
	} {
		f.PageToken = page.NextPageToken
		_, err = s.ListRuns(ctx, f)
		wantErr(t, err, store.ErrBadPageToken)
	}
	// ...but not to its page size.
	if next, err := s.ListRuns(ctx, catalog.RunFilter{Project: "p1", PageToken: page.NextPageToken, Limit: 500}); err != nil || len(next.Runs) != 120-store.DefaultRunPageSize {
		t.Fatalf("second page: %d runs, %v", len(next.Runs), err)
	}
	_, err = s.ListRuns(ctx, catalog.RunFilter{})
	wantErr(t, err, catalog.ErrInvalidArgument)
}

func TestMirrorRun(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()

	// Absent: inserted, created_at = StartedAt.
	started := time.Date(2026, 3, 4, 5, 6, 7, 123456000, time.UTC)
	st := runstate.Status{
		RunID: "sdk1", Project: "p1", Workflow: "go.Train", State: runstate.Running, Seq: 3,
		StartedAt: &started, Steps: []runstate.StepStatus{{Name: "a", Kind: "container", State: runstate.StepRunning}},
	}
	if err := s.MirrorRun(ctx, st); err != nil {
		t.Fatal(err)
	}
	r, err := s.GetRun(ctx, "p1", "sdk1")
	if err != nil {
		t.Fatal(err)
	}
	if !r.CreatedAt.Equal(started) || r.State != runstate.Running || r.Workflow != "go.Train" ||
		r.Status == nil || r.Status.Seq != 3 || len(r.Status.Steps) != 1 || r.Status.Steps[0].Name != "a" {
		t.Fatalf("inserted %+v", r)
	}

	// Newer applies; older and equal seq are ignored.
	st.Seq, st.State = 5, runstate.Succeeded
	if err := s.MirrorRun(ctx, st); err != nil {
		t.Fatal(err)
	}
	for _, stale := range []runstate.Status{
		{RunID: "sdk1", Project: "p1", Workflow: "go.Train", State: runstate.Running, Seq: 4},
		{RunID: "sdk1", Project: "p1", Workflow: "go.Train", State: runstate.Failed, Seq: 5},
		{RunID: "sdk1", Project: "p2", Workflow: "go.Train", State: runstate.Failed, Seq: 9}, // wrong tenant
	} {
		if err := s.MirrorRun(ctx, stale); err != nil {
			t.Fatal(err)
		}
	}
	r, err = s.GetRun(ctx, "p1", "sdk1")
	if err != nil || r.State != runstate.Succeeded || r.Status.Seq != 5 || !r.CreatedAt.Equal(started) {
		t.Fatalf("after stale writes: %+v, %v", r, err)
	}
	_, err = s.GetRun(ctx, "p2", "sdk1")
	wantErr(t, err, catalog.ErrNotFound)

	// A gateway-created run (seq 0) takes the first mirrored status; its
	// creation fields are kept.
	created, _, err := s.CreateRun(ctx, catalog.Run{ID: "g1", Project: "p1", Pipeline: "train", Version: 1, Workflow: "w", CreatedBy: "bob", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.MirrorRun(ctx, runstate.Status{RunID: "g1", Project: "p1", Workflow: "w", State: runstate.Running, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	r, err = s.GetRun(ctx, "p1", "g1")
	if err != nil || r.State != runstate.Running || r.Pipeline != "train" || r.Version != 1 || r.CreatedBy != "bob" ||
		!r.CreatedAt.Equal(created.CreatedAt) || r.IdempotencyKey != "k" || r.UpdatedAt.Before(created.UpdatedAt) {
		t.Fatalf("mirrored gateway run %+v, %v", r, err)
	}

	// A scheduled run (no gateway row) takes its creator from the status;
	// a gateway row keeps its own.
	if err := s.MirrorRun(ctx, runstate.Status{RunID: "sched1", Project: "p1", Workflow: "w", State: runstate.Running, Seq: 1, ScheduleID: "nightly", CreatedBy: "alice"}); err != nil {
		t.Fatal(err)
	}
	if err := s.MirrorRun(ctx, runstate.Status{RunID: "g1", Project: "p1", Workflow: "w", State: runstate.Running, Seq: 2, CreatedBy: "mallory"}); err != nil {
		t.Fatal(err)
	}
	page, err := s.ListRuns(ctx, catalog.RunFilter{Project: "p1", CreatedBy: "alice"})
	if err != nil || len(page.Runs) != 1 || page.Runs[0].ID != "sched1" {
		t.Fatalf("runs created by alice: %+v, %v", page.Runs, err)
	}
	if r, err := s.GetRun(ctx, "p1", "g1"); err != nil || r.CreatedBy != "bob" {
		t.Fatalf("g1 %+v, %v", r, err)
	}

	// No StartedAt: created now.
	if err := s.MirrorRun(ctx, runstate.Status{RunID: "sdk2", Project: "p1", Workflow: "w", State: runstate.Pending, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.GetRun(ctx, "p1", "sdk2"); err != nil || time.Since(r.CreatedAt) > time.Minute {
		t.Fatalf("sdk2 %+v, %v", r, err)
	}
	wantErr(t, s.MirrorRun(ctx, runstate.Status{Project: "p1", State: runstate.Pending}), catalog.ErrInvalidArgument)
}

func TestLogs(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	key := activities.LogKey{RunID: "r1", Step: "train", Item: -1, Attempt: 1}

	for _, c := range []struct {
		off  int64
		data string
	}{{0, "hello"}, {5, " worl"}, {10, "d!\n"}, {5, "XXXXX"} /* retried re-send: ignored */, {13, ""}} {
		if err := s.AppendLog(ctx, key, c.off, []byte(c.data)); err != nil {
			t.Fatal(err)
		}
	}
	// Other attempts and items are separate logs.
	if err := s.AppendLog(ctx, activities.LogKey{RunID: "r1", Step: "train", Item: -1, Attempt: 2}, 0, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if err := s.AppendLog(ctx, activities.LogKey{RunID: "r1", Step: "train", Item: 0, Attempt: 1}, 0, []byte("item0")); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.AppendLog(ctx, key, -1, []byte("x")), catalog.ErrInvalidArgument)

	read := func(from int64, max int) string {
		t.Helper()
		chunks, err := s.ReadLog(ctx, key, from, max)
		if err != nil {
			t.Fatal(err)
		}
		var b []byte
		next := from
		for _, c := range chunks {
			if c.Offset != next {
				t.Fatalf("chunk at %d, want %d (%+v)", c.Offset, next, chunks)
			}
			b = append(b, c.Data...)
			next += int64(len(c.Data))
		}
		return string(b)
	}
	for _, tc := range []struct {
		from int64
		max  int
		want string
	}{
		{0, 0, "hello world!\n"},
		{0, 100, "hello world!\n"},
		{5, 0, " world!\n"},
		{7, 0, "orld!\n"},
		{3, 4, "lo w"},
		{0, 5, "hello"},
		{12, 10, "\n"},
		{13, 10, ""},
		{100, 10, ""},
	} {
		if got := read(tc.from, tc.max); got != tc.want {
			t.Errorf("ReadLog(%d, %d) = %q, want %q", tc.from, tc.max, got, tc.want)
		}
	}
	chunks, err := s.ReadLog(ctx, activities.LogKey{RunID: "r1", Step: "train", Item: 0, Attempt: 1}, 0, 0)
	if err != nil || len(chunks) != 1 || string(chunks[0].Data) != "item0" {
		t.Fatalf("item log %+v, %v", chunks, err)
	}
	chunks, err = s.ReadLog(ctx, activities.LogKey{RunID: "nope", Step: "x", Attempt: 1}, 0, 0)
	if err != nil || len(chunks) != 0 {
		t.Fatalf("missing log %+v, %v", chunks, err)
	}
}

func TestGoWorkflows(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()

	if err := s.UpsertGoWorkflow(ctx, catalog.GoWorkflow{Name: "go.Train", Description: "v1", TaskQueue: "q1"}); err != nil {
		t.Fatal(err)
	}
	first, err := s.GetGoWorkflow(ctx, "go.Train")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertGoWorkflow(ctx, catalog.GoWorkflow{Name: "go.Train", Description: "v2", TaskQueue: "q2"}); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertGoWorkflow(ctx, catalog.GoWorkflow{Name: "go.Eval", TaskQueue: "q1"}); err != nil {
		t.Fatal(err)
	}
	w, err := s.GetGoWorkflow(ctx, "go.Train")
	if err != nil || w.Description != "v2" || w.TaskQueue != "q2" || w.UpdatedAt.Before(first.UpdatedAt) {
		t.Fatalf("GetGoWorkflow = %+v, %v", w, err)
	}
	list, err := s.ListGoWorkflows(ctx)
	if err != nil || len(list) != 2 || list[0].Name != "go.Eval" || list[1].Name != "go.Train" {
		t.Fatalf("ListGoWorkflows = %+v, %v", list, err)
	}
	_, err = s.GetGoWorkflow(ctx, "nope")
	wantErr(t, err, catalog.ErrNotFound)
	wantErr(t, s.UpsertGoWorkflow(ctx, catalog.GoWorkflow{}), catalog.ErrInvalidArgument)
}

func TestContextCanceled(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := s.ListProjects(ctx)
	wantErr(t, err, context.Canceled)
}

// The reconciler pages through unfinished runs with a cursor.
func TestListUnfinishedRunsPages(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	for _, id := range []string{"u1", "u2", "u3"} {
		if _, _, err := s.CreateRun(ctx, catalog.Run{ID: id, Project: "p1", Workflow: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(time.Hour)
	var seen []string
	var after catalog.RunKey
	for page := 0; page < 3; page++ {
		runs, err := s.ListUnfinishedRuns(ctx, before, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range runs {
			seen = append(seen, r.ID)
		}
		if len(runs) < 2 {
			break
		}
		after = catalog.RunKey{UpdatedAt: runs[len(runs)-1].UpdatedAt, ID: runs[len(runs)-1].ID}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, []string{"u1", "u2", "u3"}) {
		t.Fatalf("pages saw %v, want every unfinished run once", seen)
	}
	if runs, err := s.ListUnfinishedRuns(ctx, time.Now().Add(-time.Hour), catalog.RunKey{}, 10); err != nil || len(runs) != 0 {
		t.Fatalf("runs changed since before are not stale: %v, %v", runs, err)
	}
}
