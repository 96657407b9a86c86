package foreach

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/runstate"
)

// Concurrent renders of one wide step's outputs share one load; a failed
// load is not kept; past outputsCacheEntries the least recently used
// entry goes.
func TestOutputsCacheSharesLoadsAndStaysSmall(t *testing.T) {
	var c outputsCache
	var loads atomic.Int32
	release := make(chan struct{})
	slow := func() ([]any, error) {
		loads.Add(1)
		<-release
		return []any{1.0, 2.0}, nil
	}
	a := runstate.WideRef{Run: "r1", Step: "prep", Items: 2}
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs, err := c.get(a, slow)
			assert.NoError(t, err)
			assert.Equal(t, []any{1.0, 2.0}, outs)
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	assert.Equal(t, int32(1), loads.Load(), "one load for concurrent chunks")

	b := runstate.WideRef{Run: "r2", Step: "prep", Items: 2}
	_, err := c.get(b, func() ([]any, error) { return nil, errors.New("down") })
	require.Error(t, err)
	outs, err := c.get(b, func() ([]any, error) { return []any{3.0}, nil })
	require.NoError(t, err, "a failed load is tried again")
	assert.Equal(t, []any{3.0}, outs)

	_, _ = c.get(a, slow) // a used after b: b is now the oldest
	d := runstate.WideRef{Run: "r3", Step: "prep", Items: 1}
	_, _ = c.get(d, func() ([]any, error) { return []any{4.0}, nil })
	assert.Len(t, c.entries, outputsCacheEntries)
	assert.Contains(t, c.entries, a)
	assert.NotContains(t, c.entries, b)
}
