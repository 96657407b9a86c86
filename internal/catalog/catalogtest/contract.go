package catalogtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/runstate"
)

// Catalog is the part of the catalogue the contract covers.
type Catalog interface {
	CreateProject(ctx context.Context, p catalog.Project) (catalog.Project, error)
	GetProject(ctx context.Context, name string) (catalog.Project, error)
	CreatePipelineVersion(ctx context.Context, project, pipeline string, spec json.RawMessage, digest, createdBy string) (catalog.PipelineVersion, bool, error)
	GetPipelineVersion(ctx context.Context, project, name string, version int) (catalog.PipelineVersion, error)
	CreateRun(ctx context.Context, r catalog.Run) (catalog.Run, bool, error)
	CreateRunIfLatest(ctx context.Context, r catalog.Run) (catalog.Run, bool, error)
	GetRun(ctx context.Context, project, id string) (catalog.Run, error)
	ListRuns(ctx context.Context, f catalog.RunFilter) (catalog.RunPage, error)
}

// Contract runs the shared behaviour against a fresh, empty catalogue from
// newCatalog for each subtest.
func Contract(t *testing.T, newCatalog func(t *testing.T) Catalog) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	project := func(t *testing.T, c Catalog, name string) {
		t.Helper()
		if _, err := c.CreateProject(ctx, catalog.Project{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id, project, key string, at time.Time) catalog.Run {
		return catalog.Run{ID: id, Project: project, Workflow: runstate.PipelineWorkflowName, State: runstate.Pending,
			IdempotencyKey: key, RequestHash: "h-" + key, CreatedAt: at, UpdatedAt: at}
	}

	t.Run("projects are unique and missing ones are ErrNotFound", func(t *testing.T) {
		c := newCatalog(t)
		project(t, c, "alpha")
		if _, err := c.CreateProject(ctx, catalog.Project{Name: "alpha"}); !errors.Is(err, catalog.ErrConflict) {
			t.Errorf("second alpha: %v, want ErrConflict", err)
		}
		if _, err := c.GetProject(ctx, "nope"); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("missing project: %v, want ErrNotFound", err)
		}
	})

	t.Run("pipeline versions are numbered and an identical spec is deduplicated", func(t *testing.T) {
		c := newCatalog(t)
		project(t, c, "alpha")
		spec1, spec2 := json.RawMessage(`{"steps":[1]}`), json.RawMessage(`{"steps":[2]}`)
		v1, created, err := c.CreatePipelineVersion(ctx, "alpha", "train", spec1, "d1", "me")
		if err != nil || !created || v1.Version != 1 {
			t.Fatalf("first: %+v created=%v err=%v", v1, created, err)
		}
		again, created, err := c.CreatePipelineVersion(ctx, "alpha", "train", spec1, "d1", "me")
		if err != nil || created || again.Version != 1 {
			t.Fatalf("same digest: %+v created=%v err=%v, want version 1 not created", again, created, err)
		}
		v2, created, err := c.CreatePipelineVersion(ctx, "alpha", "train", spec2, "d2", "me")
		if err != nil || !created || v2.Version != 2 {
			t.Fatalf("new digest: %+v created=%v err=%v", v2, created, err)
		}
		latest, err := c.GetPipelineVersion(ctx, "alpha", "train", 0)
		if err != nil || latest.Version != 2 {
			t.Fatalf("latest: %+v %v", latest, err)
		}
		if _, err := c.GetPipelineVersion(ctx, "alpha", "train", 3); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("version 3: %v, want ErrNotFound", err)
		}
	})

	t.Run("run creation is idempotent per project and key", func(t *testing.T) {
		c := newCatalog(t)
		project(t, c, "alpha")
		project(t, c, "beta")
		first, created, err := c.CreateRun(ctx, run("r1", "alpha", "k", t0))
		if err != nil || !created {
			t.Fatalf("first: created=%v err=%v", created, err)
		}
		again, created, err := c.CreateRun(ctx, run("r2", "alpha", "k", t0))
		if err != nil || created || again.ID != first.ID {
			t.Fatalf("same key: %s created=%v err=%v, want %s not created", again.ID, created, err, first.ID)
		}
		other, created, err := c.CreateRun(ctx, run("r3", "beta", "k", t0))
		if err != nil || !created || other.ID != "r3" {
			t.Fatalf("same key, other project: %s created=%v err=%v", other.ID, created, err)
		}
		if _, err := c.GetRun(ctx, "beta", "r1"); !errors.Is(err, catalog.ErrNotFound) {
			t.Errorf("another project's run: %v, want ErrNotFound", err)
		}
	})

	t.Run("listing pages newest first, each run exactly once, also while runs are added", func(t *testing.T) {
		c := newCatalog(t)
		project(t, c, "alpha")
		for i := 0; i < 7; i++ {
			if _, _, err := c.CreateRun(ctx, run(fmt.Sprintf("r%d", i), "alpha", "", t0.Add(time.Duration(i)*time.Second))); err != nil {
				t.Fatal(err)
			}
		}
		var seen []string
		f := catalog.RunFilter{Project: "alpha", Limit: 3}
		for pages := 0; ; pages++ {
			page, err := c.ListRuns(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range page.Runs {
				seen = append(seen, r.ID)
			}
			if pages == 0 { // a newer run appears after the first page
				if _, _, err := c.CreateRun(ctx, run("new", "alpha", "", t0.Add(time.Hour))); err != nil {
					t.Fatal(err)
				}
			}
			if page.NextPageToken == "" {
				break
			}
			f.PageToken = page.NextPageToken
		}
		want := []string{"r6", "r5", "r4", "r3", "r2", "r1", "r0"}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Fatalf("pages gave %v, want %v", seen, want)
		}
		// The time window is [CreatedAfter, CreatedBefore).
		after, before := t0.Add(2*time.Second), t0.Add(4*time.Second)
		page, err := c.ListRuns(ctx, catalog.RunFilter{Project: "alpha", CreatedAfter: &after, CreatedBefore: &before})
		if err != nil {
			t.Fatal(err)
		}
		var window []string
		for _, r := range page.Runs {
			window = append(window, r.ID)
		}
		if fmt.Sprint(window) != "[r3 r2]" {
			t.Errorf("window [t0+2s, t0+4s) gave %v, want [r3 r2]", window)
		}
		_, err = c.ListRuns(ctx, catalog.RunFilter{Project: "alpha", PageToken: "not-a-token"})
		if !errors.Is(err, catalog.ErrInvalidArgument) {
			t.Errorf("bad page token: %v, want ErrInvalidArgument", err)
		}
	})

	t.Run("listing filters by pipeline, state and creator, in any combination", func(t *testing.T) {
		c := newCatalog(t)
		project(t, c, "alpha")
		project(t, c, "beta")
		// r<i>: pipeline train for even i, eval for odd; created by ci for
		// i%3 == 0, by alice for i%3 == 1, by nobody (the SDK) for i%3 == 2.
		for i := 0; i < 12; i++ {
			r := run(fmt.Sprintf("r%02d", i), "alpha", "", t0.Add(time.Duration(i)*time.Second))
			r.Pipeline = map[bool]string{true: "train", false: "eval"}[i%2 == 0]
			r.CreatedBy = []string{"ci", "alice", ""}[i%3]
			if _, _, err := c.CreateRun(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		other := run("b0", "beta", "", t0)
		other.Pipeline, other.CreatedBy = "train", "ci"
		if _, _, err := c.CreateRun(ctx, other); err != nil {
			t.Fatal(err)
		}
		after := t0.Add(6 * time.Second)
		for _, tc := range []struct {
			f    catalog.RunFilter
			want string
		}{
			{catalog.RunFilter{CreatedBy: "ci"}, "[r09 r06 r03 r00]"},
			{catalog.RunFilter{CreatedBy: "ci", Pipeline: "train"}, "[r06 r00]"},
			{catalog.RunFilter{CreatedBy: "alice", State: runstate.Pending}, "[r10 r07 r04 r01]"},
			{catalog.RunFilter{CreatedBy: "alice", Pipeline: "eval", State: runstate.Pending}, "[r07 r01]"},
			{catalog.RunFilter{CreatedBy: "alice", State: runstate.Running}, "[]"},
			{catalog.RunFilter{Pipeline: "eval", State: runstate.Pending, CreatedAfter: &after}, "[r11 r09 r07]"},
			{catalog.RunFilter{CreatedBy: "ci", CreatedAfter: &after}, "[r09 r06]"},
			{catalog.RunFilter{CreatedBy: "nobody"}, "[]"},
		} {
			f := tc.f
			f.Project, f.Limit = "alpha", 2
			var got []string
			for {
				page, err := c.ListRuns(ctx, f)
				if err != nil {
					t.Fatalf("%+v: %v", tc.f, err)
				}
				for _, r := range page.Runs {
					got = append(got, r.ID)
				}
				if page.NextPageToken == "" {
					break
				}
				f.PageToken = page.NextPageToken
			}
			if got == nil {
				got = []string{}
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("filter %+v gave %v, want %s", tc.f, got, tc.want)
			}
		}
		// A page token is bound to its filter, creator included.
		page, err := c.ListRuns(ctx, catalog.RunFilter{Project: "alpha", CreatedBy: "ci", Limit: 1})
		if err != nil || page.NextPageToken == "" {
			t.Fatalf("first page: %+v %v", page, err)
		}
		_, err = c.ListRuns(ctx, catalog.RunFilter{Project: "alpha", CreatedBy: "alice", Limit: 1, PageToken: page.NextPageToken})
		if !errors.Is(err, catalog.ErrInvalidArgument) {
			t.Errorf("ci's page token used for alice: %v, want ErrInvalidArgument", err)
		}
	})

	t.Run("a run of the newest version is created only while it is the newest", func(t *testing.T) {
		c := newCatalog(t)
		project(t, c, "alpha")
		if _, _, err := c.CreatePipelineVersion(ctx, "alpha", "train", json.RawMessage(`{"v":1}`), "d1", "me"); err != nil {
			t.Fatal(err)
		}
		r := run("r1", "alpha", "k1", t0)
		r.Pipeline, r.Version = "train", 1
		if got, created, err := c.CreateRunIfLatest(ctx, r); err != nil || !created || got.Version != 1 {
			t.Fatalf("version 1 while newest: %+v created=%v err=%v", got, created, err)
		}
		if _, _, err := c.CreatePipelineVersion(ctx, "alpha", "train", json.RawMessage(`{"v":2}`), "d2", "me"); err != nil {
			t.Fatal(err)
		}
		// The same key: the existing run, whatever the version.
		if got, created, err := c.CreateRunIfLatest(ctx, r); err != nil || created || got.ID != "r1" {
			t.Fatalf("same key: %+v created=%v err=%v", got, created, err)
		}
		stale := run("r2", "alpha", "k2", t0)
		stale.Pipeline, stale.Version = "train", 1
		if _, _, err := c.CreateRunIfLatest(ctx, stale); !errors.Is(err, catalog.ErrNotLatest) {
			t.Fatalf("version 1 after version 2: %v, want ErrNotLatest", err)
		}
		if _, err := c.GetRun(ctx, "alpha", "r2"); !errors.Is(err, catalog.ErrNotFound) {
			t.Fatalf("the refused run was written: %v", err)
		}
		stale.Version = 2
		if _, created, err := c.CreateRunIfLatest(ctx, stale); err != nil || !created {
			t.Fatalf("version 2: created=%v err=%v", created, err)
		}
		other := run("r3", "alpha", "", t0)
		other.Pipeline, other.Version = "nope", 1
		if _, _, err := c.CreateRunIfLatest(ctx, other); !errors.Is(err, catalog.ErrNotLatest) {
			t.Fatalf("unknown pipeline: %v, want ErrNotLatest", err)
		}
	})
}
