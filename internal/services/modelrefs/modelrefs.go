// Package modelrefs removes endpoints' references to model versions that
// nothing needs any more.
//
// A reference (model_version_refs, internal/store) is recorded before an
// endpoint update that serves a model version is submitted: by the
// gateway (REST create and update), by an inference step's deploy
// activity and by the activity that resolves an alias an endpoint
// follows. While one exists the version cannot be deleted. An endpoint
// keeps every revision it made (a rollback may go back to any), so a
// reference whose endpoint serves the version in any revision is needed
// for as long as the endpoint exists; the gateway removes an endpoint's
// references when it is deleted over REST.
//
// Two kinds are left behind: reservations whose update never made a
// revision (refused by the workflow, a create that failed, a followed
// alias that moved again meanwhile) and references of endpoints that
// ended without the gateway's DELETE (a workflow terminated outside
// Atelier, a gateway that failed between the deletion and the removal).
// The Sweeper removes them: every Interval it reads the references not
// recorded nor refreshed for Grace, asks each of their endpoints' workflow
// once for its revisions, and removes those whose version no revision
// serves, or all of an endpoint that no longer exists or is being
// deleted. The removal is conditional on the time again (reserved_at
// before the cut), so a reservation refreshed by an update in flight
// while the sweep runs is never removed: an update re-records its
// reference each time, and one takes far less than Grace to become a
// revision.
//
// At its start the Sweeper also backfills: it records the references of
// every revision of every endpoint, so that endpoints made before
// references existed (an upgrade) protect their versions too.
//
// This was chosen over an activity in the endpoint workflow: endpoints
// drop no revision today (only their deletion releases references), the
// sweep needs no new workflow command (no GetVersion, no replay history),
// and it also covers the leftovers a workflow cannot see (reservations of
// updates it refused, endpoints terminated from outside). Several
// gateways may sweep at once: removals are idempotent.
package modelrefs

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// Store is the part of the registry the sweeper needs (internal/store).
type Store interface {
	ModelReferencesBefore(ctx context.Context, t time.Time, after catalog.ModelVersionRef, max int) ([]catalog.ModelVersionRef, error)
	RemoveModelReference(ctx context.Context, r catalog.ModelVersionRef, before time.Time) (int64, error)
	// For the backfill.
	ListProjects(ctx context.Context) ([]catalog.Project, error)
	catalog.ModelReferrer
}

// Endpoints answers an endpoint's state (client/endpointclient); a
// missing endpoint is endpointclient.ErrNotFound.
type Endpoints interface {
	Status(ctx context.Context, project, name string) (activities.EndpointStatus, error)
	Names(ctx context.Context, project string) ([]string, error)
}

// Options tune the sweeper; zero values take the defaults.
type Options struct {
	// Interval between sweeps (default 5 min).
	Interval time.Duration
	// Grace: references recorded or refreshed more recently are left
	// alone (default 10 min), so that an update in flight keeps its
	// reservation.
	Grace time.Duration
	// Batch is how many references a page reads (default 500).
	Batch int
}

// Sweeper removes references nothing needs.
type Sweeper struct {
	store     Store
	endpoints Endpoints
	now       func() time.Time
	log       *zap.Logger
	opt       Options
}

// New returns a Sweeper; now is its clock.
func New(s Store, e Endpoints, now func() time.Time, log *zap.Logger, opt Options) *Sweeper {
	if opt.Interval <= 0 {
		opt.Interval = 5 * time.Minute
	}
	if opt.Grace <= 0 {
		opt.Grace = 10 * time.Minute
	}
	if opt.Batch <= 0 {
		opt.Batch = 500
	}
	return &Sweeper{store: s, endpoints: e, now: now, log: log, opt: opt}
}

// Run backfills, then sweeps until ctx is done (a backfill that fails is
// tried again at the next interval).
func (s *Sweeper) Run(ctx context.Context) {
	tick := time.NewTicker(s.opt.Interval)
	defer tick.Stop()
	backfilled := false
	for {
		if !backfilled {
			if err := s.Backfill(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("model references: backfill failed; retrying at the next interval", zap.Error(err))
			} else {
				backfilled = true
			}
		}
		if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("model references: sweep failed; retrying at the next interval", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Backfill records the references of every revision of every endpoint
// of every project: endpoints made before references were recorded
// (an upgrade) get theirs. A version deleted already is skipped (nothing
// to protect any more). Once per gateway start: one status query per
// endpoint; recording an existing reference again only refreshes it.
func (s *Sweeper) Backfill(ctx context.Context) error {
	projects, err := s.store.ListProjects(ctx)
	if err != nil {
		return err
	}
	var recorded int
	var failed error
	for _, p := range projects {
		names, err := s.endpoints.Names(ctx, p.Name)
		if err != nil {
			return err
		}
		for _, name := range names {
			st, err := s.endpoints.Status(ctx, p.Name, name)
			if errors.Is(err, endpointclient.ErrNotFound) {
				continue
			}
			if err != nil {
				// The others are backfilled still; the whole is tried again.
				failed = err
				continue
			}
			if st.Deleting {
				continue
			}
			for _, rev := range st.Revisions {
				m := rev.Spec.Model.Registered
				if m == nil {
					continue
				}
				err := s.store.ReferenceModelVersion(ctx, p.Name, name, m.Model, m.Version)
				switch {
				case errors.Is(err, catalog.ErrNotFound):
					s.log.Warn("model references: an endpoint's revision serves a deleted model version", zap.String("project", p.Name),
						zap.String("endpoint", name), zap.Int("revision", rev.Number), zap.String("model", m.Model), zap.Int("version", m.Version))
				case err != nil:
					return err
				default:
					recorded++
				}
			}
		}
	}
	s.log.Debug("model references: backfilled", zap.Int("references", recorded))
	return failed
}

// Sweep removes the references older than Grace that nothing needs and
// returns how many went. An endpoint whose workflow does not answer (for
// another reason than not existing) keeps its references.
func (s *Sweeper) Sweep(ctx context.Context) (int64, error) {
	cut := s.now().Add(-s.opt.Grace)
	var removed int64
	var after catalog.ModelVersionRef
	for {
		refs, err := s.store.ModelReferencesBefore(ctx, cut, after, s.opt.Batch)
		if err != nil {
			return removed, err
		}
		for i := 0; i < len(refs); {
			j := i
			for j < len(refs) && refs[j].Project == refs[i].Project && refs[j].Endpoint == refs[i].Endpoint {
				j++
			}
			n, err := s.sweepEndpoint(ctx, refs[i:j], cut)
			removed += n
			if err != nil {
				return removed, err
			}
			i = j
		}
		if len(refs) < s.opt.Batch {
			break
		}
		after = refs[len(refs)-1]
	}
	if removed > 0 {
		s.log.Info("model references: removed references no endpoint needs", zap.Int64("references", removed))
	}
	return removed, nil
}

// sweepEndpoint checks one endpoint's references (all of the same
// project and endpoint) against its workflow.
func (s *Sweeper) sweepEndpoint(ctx context.Context, refs []catalog.ModelVersionRef, cut time.Time) (int64, error) {
	r0 := refs[0]
	st, err := s.endpoints.Status(ctx, r0.Project, r0.Endpoint)
	gone := errors.Is(err, endpointclient.ErrNotFound)
	if err != nil && !gone {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		s.log.Warn("model references: cannot read an endpoint; its references stay", zap.String("project", r0.Project),
			zap.String("endpoint", r0.Endpoint), zap.Error(err))
		return 0, nil
	}
	gone = gone || st.Deleting
	var removed int64
	for _, r := range refs {
		if !gone && serves(st, r) {
			continue
		}
		n, err := s.store.RemoveModelReference(ctx, r, cut)
		if err != nil {
			return removed, err
		}
		removed += n
	}
	return removed, nil
}

// serves says whether a revision the endpoint keeps serves r's version.
func serves(st activities.EndpointStatus, r catalog.ModelVersionRef) bool {
	for _, rev := range st.Revisions {
		if m := rev.Spec.Model.Registered; m != nil && m.Model == r.Model && m.Version == r.Version {
			return true
		}
	}
	return false
}
