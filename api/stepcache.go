package api

import (
	"context"
	"errors"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// StepCacheStore holds the projects' step cache entries (written by the
// workers' cache activities; read and evicted here).
type StepCacheStore interface {
	// ListStepCache returns an error wrapping catalog.ErrInvalidArgument
	// for a bad page token.
	ListStepCache(ctx context.Context, f catalog.CacheFilter) (catalog.CachePage, error)
	EvictStepCache(ctx context.Context, project, pipeline, step string) (int64, error)
	// EvictStepCacheKey returns catalog.ErrNotFound for a key the
	// project has no entry under.
	EvictStepCacheKey(ctx context.Context, project, key string) error
}

// ListCacheEntries pages through a project's live step cache entries,
// newest first, optionally of one pipeline and/or step. The store scopes
// by project, so another tenant's entries are never listed.
func (s *server) ListCacheEntries(ctx context.Context, req gen.ListCacheEntriesRequestObject) (gen.ListCacheEntriesResponseObject, error) {
	p := req.Params
	f := catalog.CacheFilter{
		Project: req.Project, Pipeline: deref(p.Pipeline), Step: deref(p.Step),
		Now: s.now(), Limit: 50, PageToken: deref(p.PageToken),
	}
	if p.PageSize != nil {
		f.Limit = *p.PageSize
	}
	page, err := s.cat.ListStepCache(ctx, f)
	if errors.Is(err, catalog.ErrInvalidArgument) {
		return nil, newProblem(ptInvalid, "pageToken is not valid for this listing; start again without it").
			withErrors([]gen.FieldError{{Path: "query.pageToken", Message: "invalid or expired page token"}})
	}
	if err != nil {
		return nil, internalError(err)
	}
	out := gen.ListCacheEntries200JSONResponse{Entries: views(page.Entries, cacheEntryView)}
	out.NextPageToken = opt(page.NextPageToken)
	return out, nil
}

// EvictCacheEntries deletes a project's entries (of a pipeline and/or
// step when given): their steps run again in the next run.
func (s *server) EvictCacheEntries(ctx context.Context, req gen.EvictCacheEntriesRequestObject) (gen.EvictCacheEntriesResponseObject, error) {
	n, err := s.cat.EvictStepCache(ctx, req.Project, deref(req.Params.Pipeline), deref(req.Params.Step))
	if err != nil {
		return nil, internalError(err)
	}
	return gen.EvictCacheEntries200JSONResponse{Evicted: n}, nil
}

// EvictCacheEntry deletes one entry by key.
func (s *server) EvictCacheEntry(ctx context.Context, req gen.EvictCacheEntryRequestObject) (gen.EvictCacheEntryResponseObject, error) {
	err := s.cat.EvictStepCacheKey(ctx, req.Project, req.Key)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, notFound("no step cache entry %s in project %q", req.Key, req.Project)
	}
	if err != nil {
		return nil, internalError(err)
	}
	return gen.EvictCacheEntry204Response{}, nil
}
