package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/runstate"
)

// itemArtifact is the artifact "part" item k of run's step "shard" wrote.
func itemArtifact(project, run string, k int) runstate.Artifact {
	producer := runstate.ArtifactProducer{Run: run, Step: "shard", Item: &k, Attempt: 1}
	return runstate.Artifact{
		ID: runstate.ArtifactID(project, run, "shard", &k, "part"), Name: "part", Type: "dataset",
		Digest: fmt.Sprintf("sha256:%064x", k+1), Size: int64(k), Producer: producer,
	}
}

// The artifacts of a wide step's items: kept with each item (read back in
// index order, succeeded items only, below the step's length), recorded
// in lineage under their producer item, reused with the item by a retry,
// and the fan-in's directory recorded as the wide step's artifact.
func TestStepItemArtifacts(t *testing.T) {
	ctx := t.Context()
	s := newStore(t)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var recs []runstate.ItemRecord
	for k := range 1200 {
		r := runstate.ItemRecord{Index: k, State: runstate.StepSucceeded, Item: float64(k), StartedAt: t0, FinishedAt: t0}
		switch {
		case k%500 == 3:
			r.State, r.Error = runstate.StepFailed, "exit 1"
		case k%10 != 9: // items 9, 19, … wrote nothing
			r.Artifacts = []runstate.Artifact{itemArtifact("p", "run-1", k)}
		}
		recs = append(recs, r)
	}
	require.NoError(t, s.RecordItems(ctx, "p", "run-1", "shard", recs[:700]))
	require.NoError(t, s.RecordItems(ctx, "p", "run-1", "shard", recs[700:]))
	require.NoError(t, s.RecordItems(ctx, "p", "run-1", "shard", recs[690:710]), "a write again is harmless")
	require.Error(t, s.RecordItems(ctx, "", "run-1", "shard", recs[:2]), "artifacts need a project")

	var got []int
	require.NoError(t, s.StepItemArtifacts(ctx, "run-1", "shard", 1100, func(idx int, arts []runstate.Artifact) error {
		require.Len(t, arts, 1)
		assert.Equal(t, itemArtifact("p", "run-1", idx), arts[0])
		got = append(got, idx)
		return nil
	}))
	require.Len(t, got, 1100-110-3, "below 1,100: 110 wrote nothing, items 3, 503, 1003 failed")
	assert.Equal(t, []int{0, 1, 2, 4}, got[:4])
	assert.IsIncreasing(t, got)

	produced, _, err := s.RunArtifacts(ctx, "p", "run-1")
	require.NoError(t, err)
	assert.Len(t, produced, 1200-120-3, "every artifact an item wrote has its lineage row")
	l, err := s.GetArtifact(ctx, "p", itemArtifact("p", "run-1", 42).ID)
	require.NoError(t, err)
	assert.Equal(t, 42, *l.Artifact.Producer.Item)
	live, err := s.LiveArtifactDigests(ctx, "p")
	require.NoError(t, err)
	_, kept := live[itemArtifact("p", "run-1", 42).Digest]
	assert.True(t, kept, "collection keeps an item's bytes")

	// A retry reuses item 5 with its artifact (run-1's bytes and row).
	items := []any{float64(5)}
	idx, err := s.ReuseStepItems(ctx, "run-2", "run-1", "shard", 5, items)
	require.NoError(t, err)
	require.Equal(t, []int{5}, idx)
	var reused []runstate.Artifact
	require.NoError(t, s.StepItemArtifacts(ctx, "run-2", "shard", 1200, func(_ int, arts []runstate.Artifact) error {
		reused = append(reused, arts...)
		return nil
	}))
	assert.Equal(t, []runstate.Artifact{itemArtifact("p", "run-1", 5)}, reused)

	// The fan-in's directory, recorded as the wide step's (no item).
	dir := runstate.Artifact{
		ID: runstate.ArtifactID("p", "run-1", "shard", nil, "part"), Name: "part", Type: "dataset",
		Digest: fmt.Sprintf("sha256:%064x", 99999), Size: 10, Files: 3, Producer: runstate.ArtifactProducer{Run: "run-1", Step: "shard"},
	}
	require.NoError(t, s.RecordFanIn(ctx, "p", dir))
	require.NoError(t, s.RecordFanIn(ctx, "p", dir), "again: nothing changes")
	l, err = s.GetArtifact(ctx, "p", dir.ID)
	require.NoError(t, err)
	assert.Nil(t, l.Artifact.Producer.Item)
	assert.Equal(t, 3, l.Artifact.Files)
	_, err = s.GetArtifact(ctx, "other", dir.ID)
	assert.Error(t, err, "another project does not see it")
}
