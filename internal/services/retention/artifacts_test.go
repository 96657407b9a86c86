package retention_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/services/retention"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// The collector on a real Postgres and a directory store: bytes that an
// artifact row, a step cache entry or a referenced directory's manifest
// names stay; unreferenced bytes older than the grace period go, project
// by project (another project referencing the same digest keeps only its
// own copy); unreferenced bytes younger than the grace period stay.
func TestArtifactCollectorKeepsWhatIsReferenced(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(ctx, storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bs, err := artifactstore.Open(ctx, "file://"+dir)
	if err != nil {
		t.Fatal(err)
	}
	defer bs.Close()

	src := t.TempDir()
	put := func(project, name, content string) artifactstore.Object {
		t.Helper()
		p := filepath.Join(src, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(filepath.Join(p, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			p = filepath.Join(p, "sub", "f")
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(src)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		o, err := bs.PutPath(ctx, project, root, strings.TrimSuffix(name, "/"))
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	ref := put("team-a", "ref", "referenced by a run of team-a")
	dirObj := put("team-a", "dir/", "a file of a referenced directory")
	cached := put("team-a", "cached", "referenced by a cache entry")
	orphan := put("team-a", "orphan", "nobody's")
	fresh := put("team-a", "fresh", "nobody's yet")
	shared := put("team-b", "shared", "referenced by a run")
	put("team-a", "shared-a", "referenced by a run") // the same bytes in team-a: its own copy, unreferenced there
	versioned := put("team-a", "versioned", "a model version whose run is gone")
	deletedVersion := put("team-a", "deleted-version", "a deleted model version")

	// Every object is old, but fresh.
	old := time.Now().Add(-7 * time.Hour)
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.Contains(p, strings.TrimPrefix(fresh.Digest, "sha256:")) {
			return os.Chtimes(p, old, old)
		}
		return nil
	})

	artifact := func(id string, o artifactstore.Object) runstate.Artifact {
		return runstate.Artifact{ID: id, Name: id, Type: "file", Digest: o.Digest, Size: o.Size, Files: o.Files,
			Producer: runstate.ArtifactProducer{Run: "run-" + id, Step: "s", Attempt: 1}}
	}
	mirror := func(project, id string, o artifactstore.Object) {
		t.Helper()
		now := time.Now()
		st := runstate.Status{RunID: "run-" + id, Project: project, Workflow: runstate.PipelineWorkflowName, State: runstate.Succeeded, Seq: 1, StartedAt: &now,
			Steps: []runstate.StepStatus{{Name: "s", Kind: "container", State: runstate.StepSucceeded, Artifacts: []runstate.Artifact{artifact(id, o)}}}}
		if err := s.MirrorRun(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	mirror("team-a", "ref", ref)
	mirror("team-a", "dir", dirObj)
	mirror("team-b", "shared", shared)
	if err := s.PutStepCache(ctx, catalog.CacheEntry{Project: "team-a", Key: "k", Step: "s", RunID: "gone", Attempt: 1,
		Artifacts: []runstate.Artifact{artifact("c", cached)}, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}

	// Model versions outlive their runs (endpoints serve them); a deleted
	// one does not hold its bytes.
	for _, v := range []struct {
		id string
		o  artifactstore.Object
	}{{"v", versioned}, {"dv", deletedVersion}} {
		if _, _, err := s.RegisterModelVersion(ctx, catalog.NewModelVersion{Project: "team-a", Model: "m", Artifact: artifact(v.id, v.o)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteModelVersion(ctx, "team-a", "m", 2, "test"); err != nil {
		t.Fatal(err)
	}

	c := retention.NewArtifactCollector(s, bs, time.Now, zap.NewNop(), time.Hour, 6*time.Hour)
	n, _, err := c.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("collected %d objects, want 3 (team-a's orphan, its copy of the shared bytes, the deleted version's)", n)
	}
	m, err := bs.ReadManifest(ctx, "team-a", dirObj.Digest)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		project, digest string
		kept            bool
	}{
		"a run's artifact":                 {"team-a", ref.Digest, true},
		"a referenced directory":           {"team-a", dirObj.Digest, true},
		"a file of a referenced directory": {"team-a", m.Files[0].Digest, true},
		"a cache entry's artifact":         {"team-a", cached.Digest, true},
		"unreferenced, young":              {"team-a", fresh.Digest, true},
		"unreferenced, old":                {"team-a", orphan.Digest, false},
		"another project's reference":      {"team-a", shared.Digest, false},
		"that project's own":               {"team-b", shared.Digest, true},
		"a model version's":                {"team-a", versioned.Digest, true},
		"a deleted model version's":        {"team-a", deletedVersion.Digest, false},
	} {
		ok, err := bs.Exists(ctx, want.project, want.digest)
		if err != nil {
			t.Fatal(err)
		}
		if ok != want.kept {
			t.Errorf("%s: kept = %v, want %v", name, ok, want.kept)
		}
	}
}
