package retention

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/store"
)

// Store is the part of the catalogue the sweeper needs.
type Store interface {
	DeleteFinishedRuns(ctx context.Context, before time.Time, limit int) (store.Deleted, error)
}

var _ Store = (*store.Store)(nil)

// Options tune the sweeper; zero values take the defaults.
type Options struct {
	// MaxAge: finished runs last written longer ago are deleted. Zero or
	// negative disables retention (Run returns at once).
	MaxAge time.Duration
	// Interval between sweeps (default 1 min).
	Interval time.Duration
	// BatchSize is the number of runs per transaction (default 200).
	BatchSize int
	// Pause between two batches of one sweep (default 50 ms).
	Pause time.Duration
}

// Sweeper deletes expired runs periodically.
type Sweeper struct {
	store Store
	now   func() time.Time
	log   *zap.Logger
	opt   Options
}

// New returns a Sweeper; now is its clock.
func New(s Store, now func() time.Time, log *zap.Logger, opt Options) *Sweeper {
	if opt.Interval <= 0 {
		opt.Interval = time.Minute
	}
	if opt.BatchSize <= 0 {
		opt.BatchSize = 200
	}
	if opt.Pause <= 0 {
		opt.Pause = 50 * time.Millisecond
	}
	return &Sweeper{store: s, now: now, log: log, opt: opt}
}

// Enabled reports whether a retention period is set.
func (s *Sweeper) Enabled() bool { return s.opt.MaxAge > 0 }

// Run sweeps every Interval until ctx is done; it returns at once when
// retention is disabled.
func (s *Sweeper) Run(ctx context.Context) {
	if !s.Enabled() {
		return
	}
	s.log.Info("retention on", zap.Duration("maxAge", s.opt.MaxAge), zap.Duration("interval", s.opt.Interval))
	tick := time.NewTicker(s.opt.Interval)
	defer tick.Stop()
	for {
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("retention: sweep failed; retrying at the next interval", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Sweep deletes every run that has expired now, batch by batch, and
// returns the totals. It stops at the first error (what was deleted stays
// deleted) or when ctx is done.
func (s *Sweeper) Sweep(ctx context.Context) (store.Deleted, error) {
	var total store.Deleted
	before := s.now().Add(-s.opt.MaxAge)
	for {
		d, err := s.store.DeleteFinishedRuns(ctx, before, s.opt.BatchSize)
		total.Runs += d.Runs
		total.LogChunks += d.LogChunks
		total.Items += d.Items
		if err != nil {
			return total, err
		}
		if d.Runs < int64(s.opt.BatchSize) {
			break
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(s.opt.Pause):
		}
	}
	if total.Runs > 0 {
		s.log.Info("retention: deleted finished runs", zap.Int64("runs", total.Runs),
			zap.Int64("logChunks", total.LogChunks), zap.Int64("items", total.Items), zap.Time("lastWrittenBefore", before))
	}
	return total, nil
}
