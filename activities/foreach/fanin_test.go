package foreach_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/foreach"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/runstate"
)

// itemStore is the catalogue's part FanIn reads: the items' artifacts as
// step_items keeps them (the query's own behaviour is tested on Postgres
// in internal/store), and the fan-in rows it records.
type itemStore struct {
	foreach.ItemStore
	items    map[int][]runstate.Artifact
	recorded []runstate.Artifact
}

func (s *itemStore) StepItemArtifacts(_ context.Context, _, _ string, n int, fn func(int, []runstate.Artifact) error) error {
	for k := range n {
		if arts, ok := s.items[k]; ok {
			if err := fn(k, arts); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *itemStore) RecordFanIn(_ context.Context, _ string, art runstate.Artifact) error {
	s.recorded = append(s.recorded, art)
	return nil
}

// store puts a file or directory into the project's store as step item k
// would, and returns its reference as an item's artifact.
func storeItem(t *testing.T, arts *artifactstore.Store, k int, files map[string]string) runstate.Artifact {
	t.Helper()
	dir := t.TempDir()
	name := "out"
	if p, ok := files[""]; ok { // a file item
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(p), 0o644))
	} else {
		for p, c := range files {
			require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name, p)), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(dir, name, p), []byte(c), 0o644))
		}
	}
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	o, err := arts.PutPath(t.Context(), "p", root, name)
	require.NoError(t, err)
	return runstate.Artifact{Name: "part", Type: "dataset", Digest: o.Digest, Size: o.Size, Files: o.Files,
		Producer: runstate.ArtifactProducer{Run: "run-1", Step: "shard", Item: &k, Attempt: 1}}
}

// FanIn makes one directory of the items' artifacts, each under its index
// (a file item as "<k>", a directory item's files as "<k>/<path>"), over
// the bytes the items stored: the reading step downloads it as any
// directory, and only its reference is returned and recorded.
func TestFanInAssemblesTheItemsArtifactsUnderTheirIndexes(t *testing.T) {
	arts, err := artifactstore.Open(t.Context(), "file://"+t.TempDir())
	require.NoError(t, err)
	defer arts.Close()
	st := &itemStore{items: map[int][]runstate.Artifact{}}
	for k := range 12 {
		if k == 4 {
			continue // failed, or wrote nothing
		}
		files := map[string]string{"": "item " + strconv.Itoa(k)}
		if k%3 == 0 {
			files = map[string]string{"a.txt": "a" + strconv.Itoa(k), "sub/b.txt": "b"}
		}
		other := runstate.Artifact{Name: "other", Digest: "sha256:none"} // another output: not read
		st.items[k] = []runstate.Artifact{other, storeItem(t, arts, k, files)}
	}

	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(foreach.New(st, arts).FanIn, activity.RegisterOptions{Name: activities.FanInName})
	v, err := env.ExecuteActivity(activities.FanInName, activities.FanInRequest{
		Project: "p", Wide: runstate.WideRef{Run: "run-1", Step: "shard", Items: 12}, Artifact: "part",
	})
	require.NoError(t, err)
	var res activities.FanInResult
	require.NoError(t, v.Get(&res))
	require.Empty(t, res.Problem)
	a := res.Artifact
	assert.Equal(t, runstate.ArtifactID("p", "run-1", "shard", nil, "part"), a.ID)
	assert.Equal(t, runstate.ArtifactProducer{Run: "run-1", Step: "shard"}, a.Producer)
	assert.Equal(t, "dataset", a.Type)
	assert.Equal(t, 7+4*2, a.Files, "7 file items, 4 directory items of 2 files")
	assert.Equal(t, []runstate.Artifact{a}, st.recorded)

	dest := filepath.Join(t.TempDir(), "parts")
	require.NoError(t, arts.Get(t.Context(), "p", artifactstore.Object{Digest: a.Digest, Size: a.Size, Files: a.Files}, dest))
	for k := range 12 {
		switch {
		case k == 4:
			assert.NoFileExists(t, filepath.Join(dest, "4"))
			assert.NoDirExists(t, filepath.Join(dest, "4"))
		case k%3 == 0:
			b, err := os.ReadFile(filepath.Join(dest, strconv.Itoa(k), "a.txt"))
			require.NoError(t, err)
			assert.Equal(t, "a"+strconv.Itoa(k), string(b))
			assert.FileExists(t, filepath.Join(dest, strconv.Itoa(k), "sub", "b.txt"))
		default:
			b, err := os.ReadFile(filepath.Join(dest, strconv.Itoa(k)))
			require.NoError(t, err)
			assert.Equal(t, "item "+strconv.Itoa(k), string(b))
		}
	}

	// The same items make the same directory, with the digest an upload
	// of that directory gets (entries in a walk's order: "10" before "2").
	root, err := os.OpenRoot(filepath.Dir(dest))
	require.NoError(t, err)
	defer root.Close()
	up, err := arts.PutPath(t.Context(), "p", root, "parts")
	require.NoError(t, err)
	assert.Equal(t, a.Digest, up.Digest)

	// An item's directory gone from the store is a problem, not a retry.
	st.items[20] = []runstate.Artifact{{Name: "part", Digest: "sha256:" + strings.Repeat("0", 64), Files: 2}}
	v, err = env.ExecuteActivity(activities.FanInName, activities.FanInRequest{
		Project: "p", Wide: runstate.WideRef{Run: "run-1", Step: "shard", Items: 21}, Artifact: "part",
	})
	require.NoError(t, err)
	require.NoError(t, v.Get(&res))
	assert.Contains(t, res.Problem, "item 20's artifact \"part\"")

	// A worker without an artifact store says so.
	env2 := s.NewTestActivityEnvironment()
	env2.RegisterActivityWithOptions(foreach.New(st, nil).FanIn, activity.RegisterOptions{Name: activities.FanInName})
	_, err = env2.ExecuteActivity(activities.FanInName, activities.FanInRequest{Project: "p", Wide: runstate.WideRef{Run: "run-1", Step: "shard", Items: 12}, Artifact: "part"})
	require.ErrorContains(t, err, "no artifact store")
}
