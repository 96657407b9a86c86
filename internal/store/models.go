package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
	"github.com/atelier-ml/atelier/runstate"
)

// The model registry: a project's models, their versions (artifacts) and
// aliases. Version numbers of a model are consecutive: registering locks
// the model's row.

// CreateModel creates a model without versions; an existing one is
// ErrConflict.
func (s *Store) CreateModel(ctx context.Context, project, name, description, actor string) (catalog.Model, error) {
	err := s.withTx(ctx, func(q *db.Queries) error {
		if _, err := q.GetModel(ctx, db.GetModelParams{Project: project, Name: name}); err == nil {
			return fmt.Errorf("model %s/%s exists: %w", project, name, catalog.ErrConflict)
		}
		return q.EnsureModel(ctx, db.EnsureModelParams{Project: project, Name: name, Description: description, CreatedBy: actor})
	})
	if err != nil {
		return catalog.Model{}, mapErr(err, "create model %s/%s", project, name)
	}
	return s.GetModel(ctx, project, name)
}

// RegisterModelVersion makes v.Artifact a version of v.Model (creating the
// model if needed). The same artifact registers once per model: a second
// call returns the version it got, with created false.
func (s *Store) RegisterModelVersion(ctx context.Context, v catalog.NewModelVersion) (catalog.ModelVersion, bool, error) {
	var row db.ModelVersion
	var created bool
	err := s.withTx(ctx, func(q *db.Queries) error {
		var err error
		row, created, err = registerModelVersion(ctx, q, v, true)
		return err
	})
	if err != nil {
		return catalog.ModelVersion{}, false, mapErr(err, "register a version of model %s/%s", v.Project, v.Model)
	}
	out, err := toModelVersion(row)
	return out, created, err
}

// registerModelVersion registers v once per artifact. A version that was
// deleted comes back only when restore says so: an explicit registration
// (REST, a promote step) restores it, the run mirror's recording of a
// `register:` output, repeated at every status write, must not undo a
// deletion made while the run goes on.
func registerModelVersion(ctx context.Context, q *db.Queries, v catalog.NewModelVersion, restore bool) (db.ModelVersion, bool, error) {
	if err := q.EnsureModel(ctx, db.EnsureModelParams{Project: v.Project, Name: v.Model, CreatedBy: v.Actor}); err != nil {
		return db.ModelVersion{}, false, err
	}
	if _, err := q.LockModel(ctx, db.LockModelParams{Project: v.Project, Name: v.Model}); err != nil {
		return db.ModelVersion{}, false, err
	}
	if row, err := q.GetModelVersionByArtifact(ctx, db.GetModelVersionByArtifactParams{Project: v.Project, Model: v.Model, ArtifactID: v.Artifact.ID}); err == nil {
		if row.DeletedAt != nil && restore { // registered again: the version comes back
			row, err = q.RestoreModelVersion(ctx, db.RestoreModelVersionParams{Project: v.Project, Model: v.Model, Version: row.Version})
			return row, err == nil, err
		}
		return row, false, nil
	}
	meta := v.Metadata
	if meta == nil {
		meta = map[string]any{}
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return db.ModelVersion{}, false, invalid("model version metadata: %v", err)
	}
	a := v.Artifact
	row, err := q.InsertModelVersion(ctx, db.InsertModelVersionParams{
		Project: v.Project, Model: v.Model, ArtifactID: a.ID, Digest: a.Digest, Size: a.Size, Files: int32(a.Files),
		RunID: a.Producer.Run, Step: a.Producer.Step, Item: itemIndex(a.Producer.Item), Attempt: int32(a.Producer.Attempt),
		Format: v.Format, Metadata: b, CreatedBy: v.Actor,
	})
	return row, err == nil, err
}

func toModelVersion(r db.ModelVersion) (catalog.ModelVersion, error) {
	v := catalog.ModelVersion{
		Project: r.Project, Model: r.Model, Version: int(r.Version), Format: r.Format,
		CreatedAt: utc(r.CreatedAt), CreatedBy: r.CreatedBy, Aliases: []string{},
		Artifact: runstate.Artifact{
			ID: r.ArtifactID, Name: r.Model, Type: "model", Digest: r.Digest, Size: r.Size, Files: int(r.Files),
			Producer: runstate.ArtifactProducer{Run: r.RunID, Step: r.Step, Item: itemPtr(r.Item), Attempt: int(r.Attempt)},
		},
	}
	if err := json.Unmarshal(r.Metadata, &v.Metadata); err != nil {
		return v, fmt.Errorf("model version %s/%s v%d: stored metadata: %v", r.Project, r.Model, r.Version, err)
	}
	return v, nil
}

func toModel(project, name, desc, by string, latest int32, at db.Model) catalog.Model {
	return catalog.Model{Project: project, Name: name, Description: desc, Latest: int(latest), CreatedAt: utc(at.CreatedAt), CreatedBy: by, Aliases: map[string]int{}}
}

// GetModel returns a model with its aliases.
func (s *Store) GetModel(ctx context.Context, project, name string) (catalog.Model, error) {
	r, err := s.q.GetModel(ctx, db.GetModelParams{Project: project, Name: name})
	if err != nil {
		return catalog.Model{}, mapErr(err, "model %s/%s", project, name)
	}
	m := toModel(r.Project, r.Name, r.Description, r.CreatedBy, r.Latest, db.Model{CreatedAt: r.CreatedAt})
	aliases, err := s.q.ListModelAliases(ctx, db.ListModelAliasesParams{Project: project, Model: name})
	if err != nil {
		return catalog.Model{}, mapErr(err, "aliases of model %s/%s", project, name)
	}
	for _, a := range aliases {
		m.Aliases[a.Alias] = int(a.Version)
	}
	return m, nil
}

// ListModels lists a project's models, each with its aliases (one query
// for all of them).
func (s *Store) ListModels(ctx context.Context, project string) ([]catalog.Model, error) {
	rows, err := s.q.ListModels(ctx, project)
	if err != nil {
		return nil, mapErr(err, "models of %q", project)
	}
	out := make([]catalog.Model, 0, len(rows))
	for _, r := range rows {
		m := toModel(r.Project, r.Name, r.Description, r.CreatedBy, r.Latest, db.Model{CreatedAt: r.CreatedAt})
		if err := json.Unmarshal(r.Aliases, &m.Aliases); err != nil {
			return nil, fmt.Errorf("aliases of model %s/%s: %v", r.Project, r.Name, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// ListModelVersions lists a model's versions, newest first, each with its
// aliases; an unknown model is ErrNotFound.
func (s *Store) ListModelVersions(ctx context.Context, project, model string) ([]catalog.ModelVersion, error) {
	m, err := s.GetModel(ctx, project, model)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.ListModelVersions(ctx, db.ListModelVersionsParams{Project: project, Model: model})
	if err != nil {
		return nil, mapErr(err, "versions of model %s/%s", project, model)
	}
	out := make([]catalog.ModelVersion, 0, len(rows))
	for _, r := range rows {
		v, err := toModelVersion(r)
		if err != nil {
			return nil, err
		}
		v.Aliases = aliasesOf(m, v.Version)
		out = append(out, v)
	}
	return out, nil
}

func aliasesOf(m catalog.Model, version int) []string {
	out := []string{}
	for a, v := range m.Aliases {
		if v == version {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// GetModelVersion resolves ref, a version number or an alias, to a
// version of the model.
func (s *Store) GetModelVersion(ctx context.Context, project, model, ref string) (catalog.ModelVersion, error) {
	m, err := s.GetModel(ctx, project, model)
	if err != nil {
		return catalog.ModelVersion{}, err
	}
	n, err := strconv.Atoi(ref)
	if err != nil {
		v, ok := m.Aliases[ref]
		if !ok {
			return catalog.ModelVersion{}, fmt.Errorf("model %s/%s has no alias %q: %w", project, model, ref, catalog.ErrNotFound)
		}
		n = v
	}
	r, err := s.q.GetModelVersion(ctx, db.GetModelVersionParams{Project: project, Model: model, Version: int32(n)})
	if err != nil {
		return catalog.ModelVersion{}, mapErr(err, "model %s/%s version %d", project, model, n)
	}
	v, err := toModelVersion(r)
	v.Aliases = aliasesOf(m, v.Version)
	return v, err
}

// SetModelAlias points alias at version (which must exist) and records
// the move; it returns the version it named before (nil: none).
func (s *Store) SetModelAlias(ctx context.Context, project, model, alias string, version int, actor string) (*int, error) {
	var before *int
	err := s.withTx(ctx, func(q *db.Queries) error {
		if _, err := q.LockModel(ctx, db.LockModelParams{Project: project, Name: model}); err != nil {
			return err
		}
		if _, err := q.GetModelVersion(ctx, db.GetModelVersionParams{Project: project, Model: model, Version: int32(version)}); err != nil {
			return fmt.Errorf("model %s/%s has no version %d: %w", project, model, version, catalog.ErrNotFound)
		}
		var from *int32
		if cur, err := q.GetModelAliasForUpdate(ctx, db.GetModelAliasForUpdateParams{Project: project, Model: model, Alias: alias}); err == nil {
			from = &cur.Version
			b := int(cur.Version)
			before = &b
		}
		if err := q.PutModelAlias(ctx, db.PutModelAliasParams{Project: project, Model: model, Alias: alias, Version: int32(version), UpdatedBy: actor}); err != nil {
			return err
		}
		to := int32(version)
		return q.InsertModelAliasEvent(ctx, db.InsertModelAliasEventParams{Project: project, Model: model, Alias: alias, FromVersion: from, ToVersion: &to, Actor: actor})
	})
	return before, mapErr(err, "move alias %s of model %s/%s", alias, project, model)
}

// DeleteModelAlias removes an alias (ErrNotFound when absent) and records it.
func (s *Store) DeleteModelAlias(ctx context.Context, project, model, alias, actor string) error {
	err := s.withTx(ctx, func(q *db.Queries) error {
		cur, err := q.GetModelAliasForUpdate(ctx, db.GetModelAliasForUpdateParams{Project: project, Model: model, Alias: alias})
		if err != nil {
			return err
		}
		if _, err := q.DeleteModelAlias(ctx, db.DeleteModelAliasParams{Project: project, Model: model, Alias: alias}); err != nil {
			return err
		}
		return q.InsertModelAliasEvent(ctx, db.InsertModelAliasEventParams{Project: project, Model: model, Alias: alias, FromVersion: &cur.Version, Actor: actor})
	})
	return mapErr(err, "remove alias %s of model %s/%s", alias, project, model)
}

// DeleteModelVersion marks a version deleted: it no longer resolves nor
// lists, and its number is never given again. One that endpoints
// reference (model_version_refs: revisions they keep, updates in flight)
// is a *catalog.VersionReferencedError naming them, checked under the
// version's row lock so that no reference is recorded between the check
// and the deletion; one an alias names is a *catalog.VersionNamedError
// (move or remove the aliases first); both are ErrConflict. One that does
// not exist (or is deleted) is ErrNotFound.
func (s *Store) DeleteModelVersion(ctx context.Context, project, model string, version int, actor string) error {
	err := s.withTx(ctx, func(q *db.Queries) error {
		if _, err := q.LockModel(ctx, db.LockModelParams{Project: project, Name: model}); err != nil {
			return err
		}
		// The version's row FOR UPDATE: a reference being recorded
		// (ReferenceModelVersion, FOR SHARE) commits first and is listed
		// below, or waits and then finds the version deleted.
		if _, err := q.LockLiveModelVersion(ctx, db.LockLiveModelVersionParams{Project: project, Model: model, Version: int32(version)}); err != nil {
			return err // no row: no such version (or deleted), ErrNotFound
		}
		refs, err := q.ListModelVersionRefs(ctx, db.ListModelVersionRefsParams{Project: project, Model: model, Version: int32(version)})
		if err != nil {
			return err
		}
		if len(refs) > 0 {
			e := &catalog.VersionReferencedError{Model: model, Version: version}
			for _, r := range refs {
				e.Endpoints = append(e.Endpoints, r.Endpoint)
			}
			return e
		}
		aliases, err := q.ListModelAliases(ctx, db.ListModelAliasesParams{Project: project, Model: model})
		if err != nil {
			return err
		}
		var naming []string
		for _, a := range aliases {
			if int(a.Version) == version {
				naming = append(naming, a.Alias)
			}
		}
		if len(naming) > 0 {
			return &catalog.VersionNamedError{Model: model, Version: version, Aliases: naming}
		}
		n, err := q.DeleteModelVersion(ctx, db.DeleteModelVersionParams{Project: project, Model: model, Version: int32(version), DeletedBy: actor})
		if err == nil && n == 0 {
			return fmt.Errorf("model %s/%s has no version %d: %w", project, model, version, catalog.ErrNotFound)
		}
		return err
	})
	return mapErr(err, "delete version %d of model %s/%s", version, project, model)
}

// ModelAliasEvents returns a model's alias moves, newest first.
func (s *Store) ModelAliasEvents(ctx context.Context, project, model string, max int) ([]catalog.ModelAliasEvent, error) {
	rows, err := s.q.ListModelAliasEvents(ctx, db.ListModelAliasEventsParams{Project: project, Model: model, MaxRows: int32(max)})
	if err != nil {
		return nil, mapErr(err, "alias history of model %s/%s", project, model)
	}
	out := make([]catalog.ModelAliasEvent, 0, len(rows))
	for _, r := range rows {
		e := catalog.ModelAliasEvent{Alias: r.Alias, Actor: r.Actor, At: utc(r.At)}
		if r.FromVersion != nil {
			v := int(*r.FromVersion)
			e.From = &v
		}
		if r.ToVersion != nil {
			v := int(*r.ToVersion)
			e.To = &v
		}
		out = append(out, e)
	}
	return out, nil
}

// ModelVersionsOfArtifact lists the model versions an artifact is.
func (s *Store) ModelVersionsOfArtifact(ctx context.Context, project, artifactID string) ([]catalog.ModelVersion, error) {
	rows, err := s.q.ListModelVersionsOfArtifact(ctx, db.ListModelVersionsOfArtifactParams{Project: project, ArtifactID: artifactID})
	if err != nil {
		return nil, mapErr(err, "model versions of artifact %s/%s", project, artifactID)
	}
	out := make([]catalog.ModelVersion, 0, len(rows))
	for _, r := range rows {
		v, err := toModelVersion(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ReferenceModelVersion records that endpoint references a version of
// model (idempotent: a second call refreshes its time). It holds the
// version's row FOR SHARE while it inserts, so a concurrent
// DeleteModelVersion either waits and then sees the reference, or
// commits first and the reference fails with ErrNotFound: never a
// reference to a deleted version, never a deletion between the check and
// a reference.
func (s *Store) ReferenceModelVersion(ctx context.Context, project, endpoint, model string, version int) error {
	err := s.withTx(ctx, func(q *db.Queries) error {
		if _, err := q.ShareLiveModelVersion(ctx, db.ShareLiveModelVersionParams{Project: project, Model: model, Version: int32(version)}); err != nil {
			return err
		}
		return q.PutModelVersionRef(ctx, db.PutModelVersionRefParams{Project: project, Model: model, Version: int32(version), Endpoint: endpoint})
	})
	return mapErr(err, "reference version %d of model %s/%s from endpoint %s", version, project, model, endpoint)
}

// ModelReferences lists the endpoints' references to any version of
// model, by endpoint then version: the candidates for "which endpoints
// serve this model".
func (s *Store) ModelReferences(ctx context.Context, project, model string) ([]catalog.ModelVersionRef, error) {
	rows, err := s.q.ListModelRefs(ctx, db.ListModelRefsParams{Project: project, Model: model})
	if err != nil {
		return nil, mapErr(err, "references to model %s/%s", project, model)
	}
	return toModelRefs(rows), nil
}

// ModelReferencesBefore lists up to max references recorded (or refreshed)
// before t, of every project, ordered by project, endpoint, model and
// version, after the key of after (zero: from the start): the sweeper's
// candidates.
func (s *Store) ModelReferencesBefore(ctx context.Context, t time.Time, after catalog.ModelVersionRef, max int) ([]catalog.ModelVersionRef, error) {
	rows, err := s.q.ListModelRefsReservedBefore(ctx, db.ListModelRefsReservedBeforeParams{Before: t,
		AfterProject: after.Project, AfterEndpoint: after.Endpoint, AfterModel: after.Model, AfterVersion: int32(after.Version), MaxRows: int32(max)})
	if err != nil {
		return nil, mapErr(err, "model references")
	}
	return toModelRefs(rows), nil
}

func toModelRefs(rows []db.ModelVersionRef) []catalog.ModelVersionRef {
	out := make([]catalog.ModelVersionRef, len(rows))
	for i, r := range rows {
		out[i] = catalog.ModelVersionRef{Project: r.Project, Model: r.Model, Version: int(r.Version), Endpoint: r.Endpoint, ReservedAt: utc(r.ReservedAt)}
	}
	return out
}

// RemoveEndpointModelReferences removes an endpoint's references recorded
// before t (so that one an update submitted after t reserved stays), and
// returns how many went.
func (s *Store) RemoveEndpointModelReferences(ctx context.Context, project, endpoint string, before time.Time) (int64, error) {
	n, err := s.q.DeleteEndpointModelRefs(ctx, db.DeleteEndpointModelRefsParams{Project: project, Endpoint: endpoint, Before: before})
	return n, mapErr(err, "remove the model references of endpoint %s/%s", project, endpoint)
}

// RemoveModelReference removes one reference if it was recorded before t.
func (s *Store) RemoveModelReference(ctx context.Context, r catalog.ModelVersionRef, before time.Time) (int64, error) {
	n, err := s.q.DeleteModelVersionRef(ctx, db.DeleteModelVersionRefParams{Project: r.Project, Model: r.Model, Version: int32(r.Version), Endpoint: r.Endpoint, Before: before})
	return n, mapErr(err, "remove the reference of endpoint %s/%s to model %s version %d", r.Project, r.Endpoint, r.Model, r.Version)
}
