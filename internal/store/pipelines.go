package store

import (
	"context"
	"encoding/json"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// CreatePipelineVersion adds the next version of a pipeline, creating the
// pipeline on its first version. Everything happens in one transaction that
// holds the pipeline row lock, so concurrent callers get distinct,
// consecutive versions. If the newest version already has this digest it is
// returned unchanged with created == false. The project must exist
// (ErrNotFound otherwise); spec must be valid JSON and is stored byte for byte.
func (s *Store) CreatePipelineVersion(ctx context.Context, project, pipeline string, spec json.RawMessage, digest, createdBy string) (catalog.PipelineVersion, bool, error) {
	switch {
	case project == "" || pipeline == "":
		return catalog.PipelineVersion{}, false, invalid("empty project or pipeline name")
	case digest == "":
		return catalog.PipelineVersion{}, false, invalid("empty digest")
	case !json.Valid(spec):
		return catalog.PipelineVersion{}, false, invalid("spec is not valid JSON")
	}
	var (
		out     db.PipelineVersion
		created bool
	)
	err := s.withTx(ctx, func(q *db.Queries) error {
		created = false
		key := db.EnsurePipelineParams{Project: project, Name: pipeline}
		if err := q.EnsurePipeline(ctx, key); err != nil {
			return err
		}
		p, err := q.LockPipeline(ctx, db.LockPipelineParams(key))
		if err != nil {
			return err
		}
		if p.LatestVersion > 0 {
			latest, err := q.GetPipelineVersion(ctx, db.GetPipelineVersionParams{
				Project: project, Pipeline: pipeline, Version: p.LatestVersion,
			})
			if err != nil {
				return err
			}
			if latest.Digest == digest {
				out = latest
				return nil
			}
		}
		next := p.LatestVersion + 1
		out, err = q.InsertPipelineVersion(ctx, db.InsertPipelineVersionParams{
			Project: project, Pipeline: pipeline, Version: next,
			Spec: spec, Digest: digest, CreatedBy: createdBy,
		})
		if err != nil {
			return err
		}
		created = true
		return q.SetPipelineLatestVersion(ctx, db.SetPipelineLatestVersionParams{
			LatestVersion: next, Project: project, Name: pipeline,
		})
	})
	if err != nil {
		return catalog.PipelineVersion{}, false, mapErr(err, "create version of pipeline %s/%s", project, pipeline)
	}
	return toPipelineVersion(out), created, nil
}

// GetPipeline returns a pipeline's summary or ErrNotFound.
func (s *Store) GetPipeline(ctx context.Context, project, name string) (catalog.Pipeline, error) {
	row, err := s.q.GetPipeline(ctx, db.GetPipelineParams{Project: project, Name: name})
	if err != nil {
		return catalog.Pipeline{}, mapErr(err, "pipeline %s/%s", project, name)
	}
	return toPipeline(row), nil
}

// ListPipelines returns the pipelines of a project by name.
func (s *Store) ListPipelines(ctx context.Context, project string) ([]catalog.Pipeline, error) {
	rows, err := s.q.ListPipelines(ctx, project)
	if err != nil {
		return nil, mapErr(err, "list pipelines of %q", project)
	}
	out := make([]catalog.Pipeline, len(rows))
	for i, r := range rows {
		out[i] = toPipeline(r)
	}
	return out, nil
}

// GetPipelineVersion returns one version; version 0 means the newest.
func (s *Store) GetPipelineVersion(ctx context.Context, project, name string, version int) (catalog.PipelineVersion, error) {
	var (
		row db.PipelineVersion
		err error
	)
	switch {
	case version < 0 || version > 1<<31-1:
		return catalog.PipelineVersion{}, invalid("bad version %d", version)
	case version == 0:
		row, err = s.q.GetLatestPipelineVersion(ctx, db.GetLatestPipelineVersionParams{Project: project, Pipeline: name})
	default:
		row, err = s.q.GetPipelineVersion(ctx, db.GetPipelineVersionParams{Project: project, Pipeline: name, Version: int32(version)})
	}
	if err != nil {
		return catalog.PipelineVersion{}, mapErr(err, "pipeline %s/%s version %d", project, name, version)
	}
	return toPipelineVersion(row), nil
}

func toPipeline(r db.Pipeline) catalog.Pipeline {
	return catalog.Pipeline{
		Project:       r.Project,
		Name:          r.Name,
		LatestVersion: int(r.LatestVersion),
		CreatedAt:     utc(r.CreatedAt),
		UpdatedAt:     utc(r.UpdatedAt),
	}
}

func toPipelineVersion(r db.PipelineVersion) catalog.PipelineVersion {
	return catalog.PipelineVersion{
		Project:   r.Project,
		Pipeline:  r.Pipeline,
		Version:   int(r.Version),
		Spec:      json.RawMessage(r.Spec),
		Digest:    r.Digest,
		CreatedAt: utc(r.CreatedAt),
		CreatedBy: r.CreatedBy,
	}
}
