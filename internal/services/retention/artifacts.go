package retention

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/store"
)

// LineageStore is the part of the catalogue the artifact collector needs.
type LineageStore interface {
	LiveArtifactDigests(ctx context.Context, project string) (map[string]bool, error)
}

var _ LineageStore = (*store.Store)(nil)

// ArtifactBytes is the part of the artifact store the collector needs.
type ArtifactBytes interface {
	Projects(ctx context.Context) ([]string, error)
	Walk(ctx context.Context, project string, fn func(artifactstore.Stored) error) error
	ReadManifest(ctx context.Context, project, digest string) (artifactstore.Manifest, error)
	Stat(ctx context.Context, project, digest string) (artifactstore.Stored, error)
	Delete(ctx context.Context, project, digest string) error
	AbortStaleUploads(ctx context.Context, project string, before time.Time) (int, error)
}

var _ ArtifactBytes = (*artifactstore.Store)(nil)

// DefaultArtifactGrace is how old unreferenced bytes must be before they
// are collected: well past artifactstore.RefreshAfter plus the time from
// an upload to its lineage row (the run mirror, seconds).
const DefaultArtifactGrace = 6 * time.Hour

// ArtifactCollector deletes the bytes no artifact references any more:
// those of runs deleted by retention (whose lineage rows went with them),
// and outputs stored by a step that then failed; and it aborts the
// incomplete uploads of workers that died (artifactstore.StaleUpload
// after they started). Bytes are shared (the same content is stored once
// per project), so an object stays while any
// artifact row, step cache entry or referenced directory's manifest names
// its digest. It runs apart from run retention, so deleting runs never
// waits for the object store. Several gateways may collect at once:
// deleting what is already gone is not an error.
type ArtifactCollector struct {
	lineage  LineageStore
	bytes    ArtifactBytes
	now      func() time.Time
	log      *zap.Logger
	interval time.Duration
	grace    time.Duration
}

// NewArtifactCollector collects every interval (default 1 h) what has
// been unreferenced longer than grace (default DefaultArtifactGrace).
func NewArtifactCollector(l LineageStore, b ArtifactBytes, now func() time.Time, log *zap.Logger, interval, grace time.Duration) *ArtifactCollector {
	if interval <= 0 {
		interval = time.Hour
	}
	if grace <= 0 {
		grace = DefaultArtifactGrace
	}
	return &ArtifactCollector{lineage: l, bytes: b, now: now, log: log, interval: interval, grace: grace}
}

// Run collects until ctx is done.
func (c *ArtifactCollector) Run(ctx context.Context) {
	tick := time.NewTicker(c.interval)
	defer tick.Stop()
	for {
		if _, _, err := c.Collect(ctx); err != nil && ctx.Err() == nil {
			c.log.Warn("artifacts: collection of unreferenced bytes failed; retrying at the next interval", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Collect deletes, project by project, the objects no live artifact
// references that are older than the grace period, and returns how many
// objects and bytes went. A project whose live set cannot be read (the
// catalogue, a manifest) is skipped whole: nothing is deleted on a guess.
func (c *ArtifactCollector) Collect(ctx context.Context) (objects, bytes int64, err error) {
	projects, err := c.bytes.Projects(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, p := range projects {
		n, b, err := c.collectProject(ctx, p)
		objects, bytes = objects+n, bytes+b
		if err != nil {
			c.log.Warn("artifacts: project skipped this time", zap.String("project", p), zap.Error(err))
		}
	}
	if objects > 0 {
		c.log.Info("artifacts: collected unreferenced bytes", zap.Int64("objects", objects), zap.Int64("bytes", bytes))
	}
	return objects, bytes, ctx.Err()
}

func (c *ArtifactCollector) collectProject(ctx context.Context, project string) (int64, int64, error) {
	roots, err := c.lineage.LiveArtifactDigests(ctx, project)
	if err != nil {
		return 0, 0, err
	}
	live := make(map[string]bool, len(roots))
	for d, dir := range roots {
		live[d] = true
		if !dir {
			continue
		}
		m, err := c.bytes.ReadManifest(ctx, project, d)
		if err != nil && !isNotFound(err) {
			return 0, 0, err
		}
		for _, f := range m.Files {
			live[f.Digest] = true
		}
	}
	cutoff := c.now().Add(-c.grace)
	var doomed []artifactstore.Stored
	err = c.bytes.Walk(ctx, project, func(o artifactstore.Stored) error {
		if !live[o.Digest] && o.ModTime.Before(cutoff) {
			doomed = append(doomed, o)
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	var n, b int64
	for _, o := range doomed {
		// Checked again just before: an upload of the same bytes since
		// the walk rewrote them (artifactstore.RefreshAfter), and a new
		// artifact may be about to reference them.
		if cur, err := c.bytes.Stat(ctx, project, o.Digest); err != nil || !cur.ModTime.Before(cutoff) {
			continue
		}
		if err := c.bytes.Delete(ctx, project, o.Digest); err != nil {
			return n, b, err
		}
		n, b = n+1, b+o.Size
	}
	// Uploads a worker left behind when it died (S3 multipart uploads:
	// never under a key, but their parts take space).
	aborted, err := c.bytes.AbortStaleUploads(ctx, project, c.now().Add(-artifactstore.StaleUpload))
	if aborted > 0 {
		c.log.Info("artifacts: aborted uploads left behind", zap.String("project", project), zap.Int("uploads", aborted))
	}
	return n, b, err
}

func isNotFound(err error) bool { return errors.Is(err, artifactstore.ErrNotFound) }
