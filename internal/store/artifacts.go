package store

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
	"github.com/atelier-ml/atelier/runstate"
)

// Artifact lineage. The mirror records, from each run status it writes,
// the artifacts the run's steps wrote (those whose producer is this run:
// a CACHED step's belong to its source) and the artifacts steps that ran
// read. Both are keyed on their producer and consumer, so writing the
// same status again records nothing new.

// artifactRows collects what a status says was written and read.
type artifactRows struct {
	produced db.InsertArtifactsParams
	used     db.InsertArtifactUsesParams
	// register are produced artifacts that become model versions.
	register []runstate.Artifact
}

func itemIndex(item *int) int32 {
	if item == nil {
		return -1
	}
	return int32(*item)
}

func collectArtifacts(st runstate.Status) (artifactRows, bool) {
	var r artifactRows
	r.produced.Project, r.produced.RunID = st.Project, st.RunID
	r.used.Project, r.used.RunID = st.Project, st.RunID
	var visit func(ss *runstate.StepStatus, step string, item *int)
	visit = func(ss *runstate.StepStatus, step string, item *int) {
		produce := func(a runstate.Artifact) {
			p := &r.produced
			p.Ids = append(p.Ids, a.ID)
			p.Steps = append(p.Steps, a.Producer.Step)
			p.Items = append(p.Items, itemIndex(a.Producer.Item))
			p.Attempts = append(p.Attempts, int32(a.Producer.Attempt))
			p.Names = append(p.Names, a.Name)
			p.Types = append(p.Types, a.Type)
			p.Digests = append(p.Digests, a.Digest)
			p.Sizes = append(p.Sizes, a.Size)
			p.Files = append(p.Files, int32(a.Files))
			p.Sources = append(p.Sources, a.Source)
			if a.Register != "" {
				r.register = append(r.register, a)
			}
		}
		for _, a := range ss.Artifacts {
			if a.Producer.Run == st.RunID {
				produce(a)
			}
		}
		// What the step imported (a URI input) is this run's artifact
		// too, whether or not the step then ran.
		for _, in := range ss.Inputs {
			if in.Source != "" && in.Producer.Run == st.RunID && in.Producer.Step == step {
				produce(in)
			}
		}
		if len(ss.Attempts) > 0 { // it ran: a reused or cached step read nothing
			for _, in := range ss.Inputs {
				u := &r.used
				u.ArtifactIds = append(u.ArtifactIds, in.ID)
				u.Steps = append(u.Steps, step)
				u.Items = append(u.Items, itemIndex(item))
				u.Inputs = append(u.Inputs, in.Name)
			}
		}
		for k := range ss.Items {
			visit(&ss.Items[k], step, &k)
		}
	}
	for i := range st.Steps {
		visit(&st.Steps[i], st.Steps[i].Name, nil)
	}
	return r, len(r.produced.Ids) > 0 || len(r.used.ArtifactIds) > 0
}

// recordArtifacts writes the lineage rows of st, if it has any.
func (s *Store) recordArtifacts(ctx context.Context, st runstate.Status) error {
	rows, ok := collectArtifacts(st)
	if !ok {
		return nil
	}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return writeArtifactRows(ctx, s.q.WithTx(tx), st, rows)
	})
	return mapErr(err, "record the artifacts of run %s/%s", st.Project, st.RunID)
}

// recordArtifactRows writes the lineage rows of st within q's
// transaction (the items of a wide step, RecordItems).
func recordArtifactRows(ctx context.Context, q *db.Queries, st runstate.Status) error {
	rows, ok := collectArtifacts(st)
	if !ok {
		return nil
	}
	return writeArtifactRows(ctx, q, st, rows)
}

// writeArtifactRows writes rows, collected from st, within q's
// transaction: what was written and read, and the model versions outputs
// with register: become.
func writeArtifactRows(ctx context.Context, q *db.Queries, st runstate.Status, rows artifactRows) error {
	if len(rows.produced.Ids) > 0 {
		if err := q.InsertArtifacts(ctx, rows.produced); err != nil {
			return err
		}
	}
	if len(rows.used.ArtifactIds) > 0 {
		if err := q.InsertArtifactUses(ctx, rows.used); err != nil {
			return err
		}
	}
	for _, a := range rows.register {
		_, _, err := registerModelVersion(ctx, q, catalog.NewModelVersion{
			Project: st.Project, Model: a.Register, Artifact: a, Actor: "run " + st.RunID,
		}, false)
		if err != nil {
			return err
		}
	}
	return nil
}

func toStoredArtifact(a db.Artifact) catalog.StoredArtifact {
	var item *int
	if a.Item >= 0 {
		i := int(a.Item)
		item = &i
	}
	return catalog.StoredArtifact{
		Project: a.Project, CreatedAt: utc(a.CreatedAt),
		Artifact: runstate.Artifact{
			ID: a.ID, Name: a.Name, Type: a.Type, Digest: a.Digest, Size: a.Size, Files: int(a.Files),
			Producer: runstate.ArtifactProducer{Run: a.RunID, Step: a.Step, Item: item, Attempt: int(a.Attempt)},
			Source:   a.Source,
		},
	}
}

func itemPtr(i int32) *int {
	if i < 0 {
		return nil
	}
	v := int(i)
	return &v
}

// GetArtifact returns one of the project's artifacts with what it was
// made from and who read it; another project's is ErrNotFound.
func (s *Store) GetArtifact(ctx context.Context, project, id string) (catalog.ArtifactLineage, error) {
	a, err := s.q.GetArtifact(ctx, db.GetArtifactParams{Project: project, ID: id})
	if err != nil {
		return catalog.ArtifactLineage{}, mapErr(err, "artifact %s/%s", project, id)
	}
	l := catalog.ArtifactLineage{Artifact: toStoredArtifact(a), MadeFrom: []catalog.ConsumedArtifact{}, Consumers: []catalog.ArtifactUse{}}
	ins, err := s.q.ListStepInputs(ctx, db.ListStepInputsParams{Project: project, RunID: a.RunID, Step: a.Step, Item: a.Item})
	if err != nil {
		return catalog.ArtifactLineage{}, mapErr(err, "inputs of artifact %s/%s", project, id)
	}
	for _, in := range ins {
		l.MadeFrom = append(l.MadeFrom, catalog.ConsumedArtifact{
			Use:      catalog.ArtifactUse{Run: a.RunID, Step: a.Step, Item: itemPtr(a.Item), Input: in.Input},
			Artifact: toStoredArtifact(in.Artifact),
		})
	}
	cons, err := s.q.ListArtifactConsumers(ctx, db.ListArtifactConsumersParams{Project: project, ArtifactID: id, MaxRows: catalog.MaxArtifactConsumers})
	if err != nil {
		return catalog.ArtifactLineage{}, mapErr(err, "consumers of artifact %s/%s", project, id)
	}
	for _, c := range cons {
		l.Consumers = append(l.Consumers, catalog.ArtifactUse{Run: c.RunID, Step: c.Step, Item: itemPtr(c.Item), Input: c.Input, At: utc(c.CreatedAt)})
	}
	return l, nil
}

// RunArtifacts returns what a run of the project wrote and read.
func (s *Store) RunArtifacts(ctx context.Context, project, run string) ([]catalog.StoredArtifact, []catalog.ConsumedArtifact, error) {
	rows, err := s.q.ListRunArtifacts(ctx, db.ListRunArtifactsParams{Project: project, RunID: run})
	if err != nil {
		return nil, nil, mapErr(err, "artifacts of run %s/%s", project, run)
	}
	produced := make([]catalog.StoredArtifact, 0, len(rows))
	for _, a := range rows {
		produced = append(produced, toStoredArtifact(a))
	}
	uses, err := s.q.ListRunArtifactUses(ctx, db.ListRunArtifactUsesParams{Project: project, RunID: run})
	if err != nil {
		return nil, nil, mapErr(err, "artifacts read by run %s/%s", project, run)
	}
	consumed := make([]catalog.ConsumedArtifact, 0, len(uses))
	for _, u := range uses {
		consumed = append(consumed, catalog.ConsumedArtifact{
			Use:      catalog.ArtifactUse{Run: run, Step: u.UseStep, Item: itemPtr(u.UseItem), Input: u.Input, At: utc(u.UsedAt)},
			Artifact: toStoredArtifact(u.Artifact),
		})
	}
	return produced, consumed, nil
}

// LiveArtifactDigests returns every digest the project's catalogue still
// references (its runs' artifacts and its step cache entries'), and which
// of them are directories (whose manifests reference more).
func (s *Store) LiveArtifactDigests(ctx context.Context, project string) (map[string]bool, error) {
	rows, err := s.q.ListLiveArtifactDigests(ctx, project)
	if err != nil {
		return nil, mapErr(err, "live artifact digests of %q", project)
	}
	out := make(map[string]bool, len(rows))
	for _, r := range rows {
		out[r.Digest] = out[r.Digest] || r.Files > 0
	}
	return out, nil
}

// ArtifactBytesUsed is how many bytes the project's artifacts take, each
// content counted once.
func (s *Store) ArtifactBytesUsed(ctx context.Context, project string) (int64, error) {
	n, err := s.q.ArtifactBytesUsed(ctx, project)
	return n, mapErr(err, "artifact bytes of %q", project)
}

// GetArtifactImport returns what an import of uri last stored in the
// project, or ErrNotFound.
func (s *Store) GetArtifactImport(ctx context.Context, project, uri string) (catalog.ArtifactImport, error) {
	r, err := s.q.GetArtifactImport(ctx, db.GetArtifactImportParams{Project: project, Uri: uri})
	if err != nil {
		return catalog.ArtifactImport{}, mapErr(err, "import of %s in project %s", uri, project)
	}
	return catalog.ArtifactImport{Project: r.Project, URI: r.Uri, Fingerprint: r.Fingerprint, Digest: r.Digest, Size: r.Size, Files: int(r.Files)}, nil
}

// PutArtifactImport records what an import stored, replacing the last.
func (s *Store) PutArtifactImport(ctx context.Context, im catalog.ArtifactImport) error {
	err := s.q.UpsertArtifactImport(ctx, db.UpsertArtifactImportParams{
		Project: im.Project, Uri: im.URI, Fingerprint: im.Fingerprint, Digest: im.Digest, Size: im.Size, Files: int32(im.Files),
	})
	return mapErr(err, "record the import of %s in project %s", im.URI, im.Project)
}
