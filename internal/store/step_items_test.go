package store_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/runstate"
)

func itemRecords(n int, state func(k int) runstate.StepState) []runstate.ItemRecord {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	out := make([]runstate.ItemRecord, n)
	for k := range out {
		r := runstate.ItemRecord{
			Index: k, State: state(k), Item: map[string]any{"k": float64(k)},
			Attempts:  []runstate.Attempt{{Number: 1, State: state(k)}},
			StartedAt: t0, FinishedAt: t0.Add(time.Second),
		}
		if r.State == runstate.StepSucceeded {
			r.Outputs = map[string]any{"v": float64(k * k)}
		} else {
			r.Error = "exit 1\x00"
		}
		out[k] = r
	}
	return out
}

// Items of a wide step: written in batches (idempotently), paged by index
// with and without a state filter, counted, their outputs read in index
// order, reused by a retry, and deleted with their run by retention.
func TestStepItems(t *testing.T) {
	ctx := t.Context()
	s := newStore(t)
	recs := itemRecords(2500, func(k int) runstate.StepState {
		if k%100 == 7 {
			return runstate.StepFailed
		}
		return runstate.StepSucceeded
	})
	require.NoError(t, s.RecordItems(ctx, "p", "run-1", "sq", recs[:1000]))
	require.NoError(t, s.RecordItems(ctx, "p", "run-1", "sq", recs[1000:]))
	require.NoError(t, s.RecordItems(ctx, "p", "run-1", "sq", recs[990:1010]), "a write again is harmless")
	require.NoError(t, s.RecordItems(ctx, "p", "run-2", "sq", recs[:3]), "another run's items stay apart")

	counts, err := s.CountStepItems(ctx, "run-1", "sq")
	require.NoError(t, err)
	assert.Equal(t, map[runstate.StepState]int{runstate.StepSucceeded: 2475, runstate.StepFailed: 25}, counts)

	// Pages of failed items: each once, in order, the token bound to the filter.
	var failed []runstate.ItemRecord
	tok := ""
	for {
		p, err := s.ListStepItems(ctx, "run-1", "sq", runstate.StepFailed, tok, 10)
		require.NoError(t, err)
		failed = append(failed, p.Items...)
		if p.NextPageToken == "" {
			break
		}
		tok = p.NextPageToken
		_, err = s.ListStepItems(ctx, "run-1", "sq", runstate.StepSucceeded, tok, 10)
		require.True(t, errors.Is(err, catalog.ErrInvalidArgument), "a token of another filter: %v", err)
	}
	require.Len(t, failed, 25)
	for i, r := range failed {
		assert.Equal(t, 7+100*i, r.Index)
		assert.Equal(t, "exit 1", r.Error, "NUL stripped")
		assert.Equal(t, map[string]any{"k": float64(r.Index)}, r.Item)
		assert.Nil(t, r.Outputs)
	}
	all, err := s.ListStepItems(ctx, "run-1", "sq", "", "", 0)
	require.NoError(t, err)
	assert.Len(t, all.Items, store.MaxItemsPage)
	assert.True(t, recs[3].StartedAt.Equal(all.Items[3].StartedAt))
	_, err = s.ListStepItems(ctx, "run-1", "sq", "", "not-a-token", 0)
	assert.True(t, errors.Is(err, catalog.ErrInvalidArgument))

	one, err := s.GetStepItem(ctx, "run-1", "sq", 8)
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"v": 64.0}, one.Outputs)
	_, err = s.GetStepItem(ctx, "run-1", "sq", 2500)
	assert.True(t, errors.Is(err, catalog.ErrNotFound))

	outs, err := s.StepOutputs(ctx, "run-1", "sq", 2500, 1<<20)
	require.NoError(t, err)
	require.Len(t, outs, 2500)
	assert.Nil(t, outs[7], "failed items read as null")
	assert.Equal(t, map[string]any{"v": float64(2499 * 2499)}, outs[2499])
	_, err = s.StepOutputs(ctx, "run-1", "sq", 2500, 1000)
	assert.True(t, errors.Is(err, catalog.ErrInvalidArgument), "over the byte bound: %v", err)

	// A retry takes the succeeded items whose value is the same.
	items := []any{map[string]any{"k": 0.0}, map[string]any{"k": 1.0}, map[string]any{"k": 2.5}, map[string]any{"k": 7.0}}
	idx, err := s.ReuseStepItems(ctx, "run-3", "run-1", "sq", 4, items)
	require.NoError(t, err)
	assert.Empty(t, idx, "no value matches at indexes 4..7 but 7, which failed")
	idx, err = s.ReuseStepItems(ctx, "run-3", "run-1", "sq", 0, items)
	require.NoError(t, err)
	assert.ElementsMatch(t, []int{0, 1}, idx, "2 has another value, 3 is {k: 7}")
	again, err := s.ReuseStepItems(ctx, "run-3", "run-1", "sq", 0, items)
	require.NoError(t, err)
	assert.ElementsMatch(t, idx, again, "a retried reuse returns the same indexes")
	cached, err := s.ListStepItems(ctx, "run-3", "sq", runstate.StepCached, "", 0)
	require.NoError(t, err)
	require.Len(t, cached.Items, 2)
	assert.Equal(t, "reused from run run-1", cached.Items[0].Message)
	assert.Equal(t, map[string]any{"v": 1.0}, cached.Items[1].Outputs)
}
