package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
	"github.com/atelier-ml/atelier/runstate"
)

// Items of wide forEach steps (step_items; see workflows/wide.go).

// MaxItemsPage bounds ListStepItems' page size.
const MaxItemsPage = 1000

// RecordItems stores finished items of a wide step (idempotent: a record
// written again replaces the row). The artifacts the items wrote are kept
// with them (their references: a fan-in reads them, a retry reuses them)
// and recorded in the project's lineage, as the run mirror records a small
// forEach's, in the same transaction (their rows are keyed on their
// producer: written again, nothing changes).
func (s *Store) RecordItems(ctx context.Context, project, runID, step string, items []runstate.ItemRecord) error {
	if runID == "" || step == "" {
		return invalid("items need a run and a step")
	}
	if len(items) == 0 {
		return nil
	}
	p := db.UpsertStepItemsParams{RunID: runID, Step: step}
	var st runstate.Status // the items' artifacts, for lineage (collectArtifacts)
	for _, it := range items {
		item, err := json.Marshal(it.Item)
		if err != nil {
			return invalid("item %d: %v", it.Index, err)
		}
		attempts := it.Attempts
		if attempts == nil {
			attempts = []runstate.Attempt{}
		}
		att, err := json.Marshal(attempts)
		if err != nil {
			return invalid("item %d attempts: %v", it.Index, err)
		}
		out, err := json.Marshal(it.Outputs)
		if err != nil {
			return invalid("item %d outputs: %v", it.Index, err)
		}
		arts := it.Artifacts
		if arts == nil {
			arts = []runstate.Artifact{}
		}
		ab, err := json.Marshal(arts)
		if err != nil {
			return invalid("item %d artifacts: %v", it.Index, err)
		}
		if len(it.Artifacts) > 0 {
			st.Steps = append(st.Steps, runstate.StepStatus{Artifacts: it.Artifacts})
		}
		p.Idxs = append(p.Idxs, int32(it.Index))
		p.States = append(p.States, string(it.State))
		p.Items = append(p.Items, string(item))
		p.Attempts = append(p.Attempts, string(att))
		p.Errors = append(p.Errors, stripNUL(it.Error))
		p.Messages = append(p.Messages, stripNUL(it.Message))
		p.Outputs = append(p.Outputs, string(out))
		p.StartedAts = append(p.StartedAts, it.StartedAt)
		p.FinishedAts = append(p.FinishedAts, it.FinishedAt)
		p.Artifacts = append(p.Artifacts, string(ab))
	}
	if len(st.Steps) == 0 {
		return mapErr(s.q.UpsertStepItems(ctx, p), "record %d items of %s/%s", len(items), runID, step)
	}
	if project == "" {
		return invalid("the items of %s/%s wrote artifacts: they need a project", runID, step)
	}
	st.Project, st.RunID = project, runID
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.q.WithTx(tx).UpsertStepItems(ctx, p); err != nil {
			return err
		}
		return recordArtifactRows(ctx, s.q.WithTx(tx), st)
	})
	return mapErr(err, "record %d items of %s/%s", len(items), runID, step)
}

// stripNUL removes NUL bytes, which Postgres text cannot hold (an error
// message may quote a process's output).
func stripNUL(s string) string { return strings.ReplaceAll(s, "\x00", "") }

// ListStepItems returns a page of up to limit items of a run's step after
// the page token, in index order, only those in state when it is not "".
// A token issued for another state filter is ErrBadPageToken.
func (s *Store) ListStepItems(ctx context.Context, runID, step string, state runstate.StepState, pageToken string, limit int) (catalog.ItemPage, error) {
	if limit <= 0 || limit > MaxItemsPage {
		limit = MaxItemsPage
	}
	after := int32(-1)
	if pageToken != "" {
		v, err := decodeItemCursor(pageToken, state)
		if err != nil {
			return catalog.ItemPage{}, err
		}
		after = v
	}
	var recs []runstate.ItemRecord
	if state == "" {
		rows, err := s.lq.ListStepItems(ctx, db.ListStepItemsParams{RunID: runID, Step: step, After: after, MaxRows: int32(limit)})
		if err != nil {
			return catalog.ItemPage{}, mapErr(err, "list items of %s/%s", runID, step)
		}
		for _, r := range rows {
			rec, err := itemRecord(r.Idx, r.State, r.Item, r.Attempts, r.Error, r.Message, r.Outputs)
			if err != nil {
				return catalog.ItemPage{}, err
			}
			rec.StartedAt, rec.FinishedAt = r.StartedAt, r.FinishedAt
			recs = append(recs, rec)
		}
	} else {
		rows, err := s.lq.ListStepItemsByState(ctx, db.ListStepItemsByStateParams{RunID: runID, Step: step, State: string(state), After: after, MaxRows: int32(limit)})
		if err != nil {
			return catalog.ItemPage{}, mapErr(err, "list items of %s/%s", runID, step)
		}
		for _, r := range rows {
			rec, err := itemRecord(r.Idx, r.State, r.Item, r.Attempts, r.Error, r.Message, r.Outputs)
			if err != nil {
				return catalog.ItemPage{}, err
			}
			rec.StartedAt, rec.FinishedAt = r.StartedAt, r.FinishedAt
			recs = append(recs, rec)
		}
	}
	page := catalog.ItemPage{Items: recs}
	if len(recs) == limit {
		page.NextPageToken = encodeItemCursor(recs[len(recs)-1].Index, state)
	}
	return page, nil
}

// GetStepItem returns item idx of a run's step (catalog.ErrNotFound when
// it is not recorded, e.g. still running).
func (s *Store) GetStepItem(ctx context.Context, runID, step string, idx int) (runstate.ItemRecord, error) {
	rows, err := s.q.ListStepItems(ctx, db.ListStepItemsParams{RunID: runID, Step: step, After: int32(idx - 1), MaxRows: 1})
	if err != nil {
		return runstate.ItemRecord{}, mapErr(err, "get item %d of %s/%s", idx, runID, step)
	}
	if len(rows) == 0 || int(rows[0].Idx) != idx {
		return runstate.ItemRecord{}, fmt.Errorf("%w: item %d of %s/%s", catalog.ErrNotFound, idx, runID, step)
	}
	r := rows[0]
	rec, err := itemRecord(r.Idx, r.State, r.Item, r.Attempts, r.Error, r.Message, r.Outputs)
	rec.StartedAt, rec.FinishedAt = r.StartedAt, r.FinishedAt
	return rec, err
}

func itemRecord(idx int32, state string, item, attempts json.RawMessage, errMsg, msg string, outputs json.RawMessage) (runstate.ItemRecord, error) {
	rec := runstate.ItemRecord{Index: int(idx), State: runstate.StepState(state), Error: errMsg, Message: msg}
	if err := json.Unmarshal(item, &rec.Item); err != nil {
		return rec, fmt.Errorf("item %d: %w", idx, err)
	}
	if err := json.Unmarshal(attempts, &rec.Attempts); err != nil {
		return rec, fmt.Errorf("item %d attempts: %w", idx, err)
	}
	if err := json.Unmarshal(outputs, &rec.Outputs); err != nil {
		return rec, fmt.Errorf("item %d outputs: %w", idx, err)
	}
	return rec, nil
}

// CountStepItems counts a step's stored items by state.
func (s *Store) CountStepItems(ctx context.Context, runID, step string) (map[runstate.StepState]int, error) {
	rows, err := s.q.CountStepItems(ctx, db.CountStepItemsParams{RunID: runID, Step: step})
	if err != nil {
		return nil, mapErr(err, "count items of %s/%s", runID, step)
	}
	out := make(map[runstate.StepState]int, len(rows))
	for _, r := range rows {
		out[runstate.StepState(r.State)] = int(r.N)
	}
	return out, nil
}

// StepOutputs returns the outputs of a wide step's n items in index order,
// null for items that did not succeed, reading at most maxBytes of JSON
// (more is an error naming the limit: the caller holds them in memory).
func (s *Store) StepOutputs(ctx context.Context, runID, step string, n int, maxBytes int) ([]any, error) {
	out := make([]any, n)
	after, read := int32(-1), 0
	const page = 10_000
	for {
		rows, err := s.lq.ListStepOutputs(ctx, db.ListStepOutputsParams{RunID: runID, Step: step, After: after, MaxRows: page})
		if err != nil {
			return nil, mapErr(err, "read outputs of %s/%s", runID, step)
		}
		for _, r := range rows {
			read += len(r.Outputs)
			if read > maxBytes {
				return nil, invalid("the outputs of step %q exceed %d MiB", step, maxBytes>>20)
			}
			if int(r.Idx) >= n {
				continue
			}
			var v any
			if err := json.Unmarshal(r.Outputs, &v); err != nil {
				return nil, fmt.Errorf("outputs of item %d of %s/%s: %w", r.Idx, runID, step, err)
			}
			out[r.Idx] = v
			after = r.Idx
		}
		if len(rows) < page {
			return out, nil
		}
	}
}

// maxFanInRows is how many items' artifacts StepItemArtifacts reads per
// query.
const maxFanInRows = 10_000

// StepItemArtifacts calls fn, in index order, with the artifacts of each
// item below n of a wide step that succeeded (or was reused) and wrote
// any; it reads them a page at a time, so a fan-in over 100,000 items
// never holds every row.
func (s *Store) StepItemArtifacts(ctx context.Context, runID, step string, n int, fn func(idx int, arts []runstate.Artifact) error) error {
	after := int32(-1)
	for {
		rows, err := s.lq.ListStepItemArtifacts(ctx, db.ListStepItemArtifactsParams{RunID: runID, Step: step, After: after, Below: int32(n), MaxRows: maxFanInRows})
		if err != nil {
			return mapErr(err, "read the item artifacts of %s/%s", runID, step)
		}
		for _, r := range rows {
			var arts []runstate.Artifact
			if err := json.Unmarshal(r.Artifacts, &arts); err != nil {
				return fmt.Errorf("artifacts of item %d of %s/%s: %w", r.Idx, runID, step, err)
			}
			if err := fn(int(r.Idx), arts); err != nil {
				return err
			}
			after = r.Idx
		}
		if len(rows) < maxFanInRows {
			return nil
		}
	}
}

// RecordFanIn records art, the directory a fan-in assembled from a wide
// step's items' artifacts, in the project's lineage under its producer
// (the wide step), so that the steps reading it are uses of an artifact
// REST can show and the collector of unreferenced bytes keeps its
// manifest. Recorded again, nothing changes.
func (s *Store) RecordFanIn(ctx context.Context, project string, art runstate.Artifact) error {
	st := runstate.Status{Project: project, RunID: art.Producer.Run, Steps: []runstate.StepStatus{{Artifacts: []runstate.Artifact{art}}}}
	rows, _ := collectArtifacts(st)
	return mapErr(s.q.InsertArtifacts(ctx, rows.produced), "record the fan-in %s of %s/%s", art.Name, art.Producer.Run, art.Producer.Step)
}

// ReuseStepItems copies, for a retry, the items of oldRun's step at
// start+k whose value equals items[k] and that succeeded there, as CACHED
// items of newRun, and returns their indexes.
func (s *Store) ReuseStepItems(ctx context.Context, newRun, oldRun, step string, start int, items []any) ([]int, error) {
	p := db.ReuseStepItemsParams{NewRun: newRun, OldRun: oldRun, Step: step, Message: "reused from run " + oldRun}
	for k, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, invalid("item %d: %v", start+k, err)
		}
		p.Idxs = append(p.Idxs, int32(start+k))
		p.Items = append(p.Items, string(b))
	}
	idx, err := s.q.ReuseStepItems(ctx, p)
	if err != nil {
		return nil, mapErr(err, "reuse items of %s/%s", oldRun, step)
	}
	out := make([]int, len(idx))
	for i, v := range idx {
		out[i] = int(v)
	}
	return out, nil
}

// Item page tokens: "<state>:<last index>", base64 (opaque to clients;
// bound to the state filter so a token cannot be replayed on another).
func encodeItemCursor(idx int, state runstate.StepState) string {
	return base64.RawURLEncoding.EncodeToString([]byte(string(state) + ":" + strconv.Itoa(idx)))
}

func decodeItemCursor(tok string, state runstate.StepState) (int32, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return 0, ErrBadPageToken
	}
	st, idx, ok := strings.Cut(string(b), ":")
	if !ok {
		return 0, ErrBadPageToken
	}
	if st != string(state) {
		return 0, fmt.Errorf("%w: issued for another state filter", ErrBadPageToken)
	}
	v, err := strconv.ParseInt(idx, 10, 32)
	if err != nil || v < 0 {
		return 0, ErrBadPageToken
	}
	return int32(v), nil
}
