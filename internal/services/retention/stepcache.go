package retention

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/store"
)

// CacheStore is the part of the catalogue the step cache sweep needs.
type CacheStore interface {
	DeleteExpiredStepCache(ctx context.Context, now time.Time, limit int) (int64, error)
}

var _ CacheStore = (*store.Store)(nil)

// CacheSweeper deletes expired step cache entries (those stored with a
// ttl). Lookups already ignore them; the sweep only keeps the table from
// growing. Unlike run retention it is always on: an expired entry is of
// no use to anyone. Several gateways may sweep at once; a batch deletes
// what it finds.
type CacheSweeper struct {
	store    CacheStore
	now      func() time.Time
	log      *zap.Logger
	interval time.Duration
	batch    int
}

// NewCacheSweeper sweeps every interval (default 10 min) in batches of
// 500 entries.
func NewCacheSweeper(s CacheStore, now func() time.Time, log *zap.Logger, interval time.Duration) *CacheSweeper {
	if interval <= 0 {
		interval = 10 * time.Minute
	}
	return &CacheSweeper{store: s, now: now, log: log, interval: interval, batch: 500}
}

// Run sweeps until ctx is done.
func (c *CacheSweeper) Run(ctx context.Context) {
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		if _, err := c.Sweep(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("step cache: sweep of expired entries failed; retrying at the next interval", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Sweep deletes every entry expired now, batch by batch, and returns how
// many went.
func (c *CacheSweeper) Sweep(ctx context.Context) (int64, error) {
	var total int64
	now := c.now()
	for {
		n, err := c.store.DeleteExpiredStepCache(ctx, now, c.batch)
		total += n
		if err != nil || n < int64(c.batch) || ctx.Err() != nil {
			if total > 0 {
				c.log.Info("step cache: deleted expired entries", zap.Int64("entries", total))
			}
			return total, err
		}
	}
}
