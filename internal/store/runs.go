package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
	"github.com/atelier-ml/atelier/runstate"
)

// Page sizes of ListRuns.
const (
	DefaultRunPageSize = 50
	MaxRunPageSize     = 500
)

// CreateRun inserts a PENDING run (Seq 0) and returns it with created ==
// true. An empty r.ID is generated; a zero r.CreatedAt means now. If
// r.IdempotencyKey is set and the project already has a run with that key,
// that run is returned unchanged with created == false: the caller compares
// RequestHash to tell a retry from a reuse of the key. A taken ID is
// ErrConflict. State, Seq and UpdatedAt of r are ignored.
func (s *Store) CreateRun(ctx context.Context, r catalog.Run) (catalog.Run, bool, error) {
	p, err := createRunParams(&r)
	if err != nil {
		return catalog.Run{}, false, err
	}
	// A conflicting key makes the insert return no row; the existing run is
	// then read. Retry if that run was deleted in between (DeleteRun).
	for range 3 {
		row, err := s.inserts.insert(ctx, p)
		if err == nil {
			run, err := toRun(row)
			return run, true, err
		}
		if !errors.Is(err, pgx.ErrNoRows) || p.IdempotencyKey == nil {
			return catalog.Run{}, false, mapErr(err, "create run %q", r.ID)
		}
		row, err = s.q.GetRunByIdempotencyKey(ctx, db.GetRunByIdempotencyKeyParams{
			Project: r.Project, IdempotencyKey: p.IdempotencyKey,
		})
		if err == nil {
			run, err := toRun(row)
			return run, false, err
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return catalog.Run{}, false, mapErr(err, "create run %q", r.ID)
		}
	}
	return catalog.Run{}, false, fmt.Errorf("create run %q: %w: idempotency key raced with deletion", r.ID, catalog.ErrConflict)
}

// createRunParams validates r, fills its ID, and builds the insert.
func createRunParams(r *catalog.Run) (db.InsertRunsParams, error) {
	if r.Project == "" {
		return db.InsertRunsParams{}, invalid("empty project")
	}
	if r.ID == "" {
		r.ID = newID("run-")
	}
	if len(r.Input) > 0 && !json.Valid(r.Input) {
		return db.InsertRunsParams{}, invalid("run input is not valid JSON")
	}
	p := db.InsertRunsParams{
		ID:             r.ID,
		Project:        r.Project,
		Pipeline:       strPtr(r.Pipeline),
		Workflow:       r.Workflow,
		State:          string(runstate.Pending),
		CreatedBy:      r.CreatedBy,
		IdempotencyKey: strPtr(r.IdempotencyKey),
		RequestHash:    r.RequestHash,
	}
	if r.Version != 0 {
		v := int32(r.Version)
		p.Version = &v
	}
	if !r.CreatedAt.IsZero() {
		p.CreatedAt = &r.CreatedAt
	}
	if len(r.Input) > 0 {
		p.Input = jsonbSafe(r.Input)
	}
	if r.Status != nil {
		b, err := json.Marshal(r.Status)
		if err != nil {
			return db.InsertRunsParams{}, invalid("run status: %v", err)
		}
		p.Status = jsonbSafe(b)
	}
	return p, nil
}

// CreateRunIfLatest is CreateRun for a run of r.Version of pipeline
// r.Pipeline that must still be the pipeline's newest version: in one
// statement, it inserts the row only if it is. Otherwise nothing is
// written and the error wraps catalog.ErrNotLatest (a gateway that took
// the newest version from its cache then reads it again). A taken
// idempotency key answers as CreateRun does.
func (s *Store) CreateRunIfLatest(ctx context.Context, r catalog.Run) (catalog.Run, bool, error) {
	if r.Pipeline == "" || r.Version <= 0 {
		return catalog.Run{}, false, invalid("CreateRunIfLatest needs a pipeline and a version")
	}
	p, err := createRunParams(&r)
	if err != nil {
		return catalog.Run{}, false, err
	}
	p.Latest = p.Version
	row, err := s.inserts.insert(ctx, p)
	if err == nil {
		run, err := toRun(row)
		return run, true, err
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return catalog.Run{}, false, mapErr(err, "create run %q", r.ID)
	}
	// No row: the key is taken, or the version is not the newest.
	if p.IdempotencyKey != nil {
		row, err := s.q.GetRunByIdempotencyKey(ctx, db.GetRunByIdempotencyKeyParams{Project: r.Project, IdempotencyKey: p.IdempotencyKey})
		if err == nil {
			run, err := toRun(row)
			return run, false, err
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return catalog.Run{}, false, mapErr(err, "create run %q", r.ID)
		}
	}
	return catalog.Run{}, false, fmt.Errorf("create run %q: version %d of %s/%s: %w", r.ID, r.Version, r.Project, r.Pipeline, catalog.ErrNotLatest)
}

// GetRun returns a run of project; a run of another project is ErrNotFound.
func (s *Store) GetRun(ctx context.Context, project, id string) (catalog.Run, error) {
	row, err := s.q.GetRun(ctx, db.GetRunParams{Project: project, ID: id})
	if err != nil {
		return catalog.Run{}, mapErr(err, "run %s/%s", project, id)
	}
	return toRun(row)
}

// DeleteRun removes a run row, e.g. when starting its workflow failed right
// after CreateRun. ErrNotFound if absent.
func (s *Store) DeleteRun(ctx context.Context, id string) error {
	n, err := s.q.DeleteRun(ctx, id)
	if err != nil {
		return mapErr(err, "delete run %q", id)
	}
	if n == 0 {
		return mapErr(catalog.ErrNotFound, "delete run %q", id)
	}
	return nil
}

// MirrorRun records a run's status. A run without a row (started directly
// through the Temporal SDK, or by a schedule) is inserted, with CreatedAt =
// StartedAt or now and CreatedBy from the status (the token that started
// it or created its schedule), which also fills a row's empty CreatedBy.
// Otherwise state, seq, status and updated_at are replaced only if s.Seq is
// greater than the stored seq, so stale and replayed writes are ignored; a
// status whose project differs from the stored row's is ignored too. A
// status that is applied replaces the run's metric rows (its steps' scalar
// metrics, read by ListRuns with ByMetric) in the same statement.
func (s *Store) MirrorRun(ctx context.Context, st runstate.Status) error {
	if st.RunID == "" || st.Project == "" || st.State == "" {
		return invalid("run status needs runId, project and state")
	}
	b, err := json.Marshal(st)
	if err != nil {
		return invalid("run status: %v", err)
	}
	p := db.MirrorRunParams{
		ID:        st.RunID,
		Project:   st.Project,
		Pipeline:  strPtr(st.Pipeline),
		Workflow:  st.Workflow,
		State:     string(st.State),
		Seq:       st.Seq,
		Status:    jsonbSafe(b),
		CreatedAt: st.StartedAt,
		Schedule:  strPtr(st.ScheduleID),
		CreatedBy: st.CreatedBy,
	}
	if st.Version != 0 {
		v := int32(st.Version)
		p.Version = &v
	}
	p.MetricSteps, p.MetricNames, p.MetricValues = metricRows(st)
	// Lineage first: a status that is never written again (the run's
	// last) must not be stored without the artifacts it lists.
	if err := s.recordArtifacts(ctx, st); err != nil {
		return err
	}
	events := catalog.RunEvents(st)
	if len(events) == 0 {
		err = s.q.MirrorRun(ctx, p)
		return mapErr(err, "mirror run %s/%s", st.Project, st.RunID)
	}
	// A status that shows events (a failed step, an approval request,
	// the run's end) also queues their webhook deliveries, in the same
	// statement (see internal/services/webhooks).
	n := db.MirrorRunNotifyParams{
		ID: p.ID, Project: p.Project, Pipeline: p.Pipeline, Version: p.Version, Workflow: p.Workflow,
		State: p.State, Seq: p.Seq, Status: p.Status, CreatedAt: p.CreatedAt, Schedule: p.Schedule, CreatedBy: p.CreatedBy, Subject: st.Pipeline,
		MetricSteps: p.MetricSteps, MetricNames: p.MetricNames, MetricValues: p.MetricValues,
	}
	if n.Subject == "" {
		n.Subject = st.Workflow // a Go pipeline: webhooks filter on its registered name
	}
	// A final status also fires the project's run triggers on this
	// pipeline (internal/services/triggers), with what their templates
	// read as upstream.
	n.Finished = st.State.Terminal()
	n.TriggerPayload = json.RawMessage("{}")
	if n.Finished {
		tp, err := catalog.NewRunFinishedPayload(st, n.Subject)
		if err != nil {
			return invalid("run status: %v", err)
		}
		n.TriggerPayload = jsonbSafe(tp)
	}
	for _, e := range events {
		n.EventIds = append(n.EventIds, e.ID)
		n.EventTypes = append(n.EventTypes, e.Type)
		n.EventSteps = append(n.EventSteps, e.Step)
		n.EventPayloads = append(n.EventPayloads, string(e.Payload))
		n.EventPayloadsOutput = append(n.EventPayloadsOutput, string(e.PayloadWithOutput))
	}
	_, err = s.q.MirrorRunNotify(ctx, n)
	return mapErr(err, "mirror run %s/%s", st.Project, st.RunID)
}

// metricRows are the run_metrics rows of a status (one entry per step
// and scalar metric, in the three slices): of each step name, the first
// step that reported the metric, as listings by metric read a status.
// Never nil, so that a status without metrics clears a run's rows.
func metricRows(st runstate.Status) (steps, names []string, values []float64) {
	steps, names, values = []string{}, []string{}, []float64{}
	type key struct{ step, name string }
	var seen map[key]bool
	for _, step := range st.Steps {
		if step.Metrics == nil {
			continue
		}
		for name, v := range step.Metrics.Scalars {
			k := key{step.Name, name}
			if seen[k] {
				continue
			}
			if seen == nil {
				seen = map[key]bool{}
			}
			seen[k] = true
			steps, names, values = append(steps, step.Name), append(names, name), append(values, v)
		}
	}
	return steps, names, values
}

// ListRuns returns one page of a project's runs, newest first (created_at,
// then id, descending). Filters: Pipeline, State, CreatedBy, Schedule,
// CreatedAfter (inclusive), CreatedBefore (exclusive), in any combination;
// each combination reads one index range in order (no COUNT, no OFFSET;
// with Schedule, the schedule's range, Pipeline and CreatedBy filtering
// within it), so a
// page costs the same at any table size and any depth. Listed runs carry
// no Status, Input, IdempotencyKey or RequestHash (GetRun has them). Limit defaults to 50 and is capped at 500 (it
// may change between pages). A PageToken not produced by ListRuns for the
// same filter is ErrBadPageToken (wrapping catalog.ErrInvalidArgument). Walking the pages
// visits each run matching the filter exactly once, even while new runs are
// being created (they sort before the cursor).
func (s *Store) ListRuns(ctx context.Context, f catalog.RunFilter) (catalog.RunPage, error) {
	if f.Project == "" {
		return catalog.RunPage{}, invalid("empty project")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultRunPageSize
	}
	limit = min(limit, MaxRunPageSize)

	fh := filterHash(f)
	if f.ByMetric != nil {
		return s.listRunsByMetric(ctx, f, fh, limit)
	}
	var curT *time.Time
	var curID *string
	if f.PageToken != "" {
		c, err := decodeCursor(f.PageToken, fh)
		if err != nil {
			return catalog.RunPage{}, err
		}
		curT, curID = &c.t, &c.id
	}

	rows, err := s.listRuns(ctx, f, curT, curID, int32(limit+1)) // one more to know whether a next page exists
	if err != nil {
		return catalog.RunPage{}, mapErr(err, "list runs of %q", f.Project)
	}

	var page catalog.RunPage
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		page.NextPageToken = encodeCursor(cursor{t: last.CreatedAt, id: last.ID, filter: fh})
	}
	page.Runs = make([]catalog.Run, len(rows))
	for i, r := range rows {
		page.Runs[i] = summaryToRun(r)
	}
	return page, nil
}

// listRuns runs the query of f's combination of equality filters: each has
// an index of exactly those columns followed by the keyset order (see
// queries/runs.sql and migration 00005). They run with custom plans (lq).
func (s *Store) listRuns(ctx context.Context, f catalog.RunFilter, curT *time.Time, curID *string, max int32) ([]db.RunSummary, error) {
	after, before := f.CreatedAfter, f.CreatedBefore
	p, st, by := f.Pipeline, string(f.State), f.CreatedBy
	switch {
	case f.Schedule != "" && st == "":
		return s.lq.ListRunsBySchedule(ctx, db.ListRunsByScheduleParams{Project: f.Project, Schedule: f.Schedule, Pipeline: p, CreatedBy: by,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case f.Schedule != "":
		return s.lq.ListRunsByScheduleState(ctx, db.ListRunsByScheduleStateParams{Project: f.Project, Schedule: f.Schedule, State: st, Pipeline: p, CreatedBy: by,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case by == "" && p == "" && st == "":
		return s.lq.ListRuns(ctx, db.ListRunsParams{Project: f.Project,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case by == "" && p != "" && st == "":
		return s.lq.ListRunsByPipeline(ctx, db.ListRunsByPipelineParams{Project: f.Project, Pipeline: p,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case by == "" && p == "" && st != "":
		return s.lq.ListRunsByState(ctx, db.ListRunsByStateParams{Project: f.Project, State: st,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case by == "" && p != "" && st != "":
		return s.lq.ListRunsByPipelineState(ctx, db.ListRunsByPipelineStateParams{Project: f.Project, Pipeline: p, State: st,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case p == "" && st == "":
		return s.lq.ListRunsByCreator(ctx, db.ListRunsByCreatorParams{Project: f.Project, CreatedBy: by,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case p == "":
		return s.lq.ListRunsByCreatorState(ctx, db.ListRunsByCreatorStateParams{Project: f.Project, CreatedBy: by, State: st,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	case st == "":
		return s.lq.ListRunsByCreatorPipeline(ctx, db.ListRunsByCreatorPipelineParams{Project: f.Project, CreatedBy: by, Pipeline: p,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	default:
		return s.lq.ListRunsByCreatorPipelineState(ctx, db.ListRunsByCreatorPipelineStateParams{Project: f.Project, CreatedBy: by, Pipeline: p, State: st,
			CreatedAfter: after, CreatedBefore: before, CursorCreatedAt: curT, CursorID: curID, MaxRows: max})
	}
}

// summaryToRun converts a list row: a Run without Status, Input,
// IdempotencyKey and RequestHash.
func summaryToRun(r db.RunSummary) catalog.Run {
	run := catalog.Run{
		ID:        r.ID,
		Project:   r.Project,
		Pipeline:  deref(r.Pipeline),
		Workflow:  r.Workflow,
		State:     runstate.State(r.State),
		CreatedAt: utc(r.CreatedAt),
		UpdatedAt: utc(r.UpdatedAt),
		CreatedBy: r.CreatedBy,
	}
	if r.Version != nil {
		run.Version = int(*r.Version)
	}
	return run
}

// cursor is the keyset position after which the next page starts, and the
// filter it was issued for.
type cursor struct {
	t      time.Time
	id     string
	filter string
	key    *float64 // a listing by metric: the value as ordered
}

type cursorJSON struct {
	V  int      `json:"v"`
	T  int64    `json:"t"` // created_at, Unix microseconds (Postgres precision)
	ID string   `json:"i"`
	F  string   `json:"f"`           // filterHash
	K  *float64 `json:"k,omitempty"` // cursor.key
}

// listRunsByMetric is ListRuns with f.ByMetric: f.Pipeline's runs that
// reported the metric, by its value, read from run_metrics (see the
// queries); other filters than State are ErrInvalidArgument. Its page
// token carries the value as ordered (negated when descending), as it did
// when the value was read from each status.
func (s *Store) listRunsByMetric(ctx context.Context, f catalog.RunFilter, fh string, limit int) (catalog.RunPage, error) {
	m := f.ByMetric
	if f.Pipeline == "" || f.CreatedBy != "" || f.Schedule != "" || f.CreatedAfter != nil || f.CreatedBefore != nil {
		return catalog.RunPage{}, invalid("runs are listed by a metric within one pipeline, optionally of one state")
	}
	p := db.ListRunsByMetricAscParams{Metric: m.Name, Step: m.Step, Project: f.Project, Pipeline: f.Pipeline,
		MinValue: m.Min, MaxValue: m.Max, MaxRows: int32(limit + 1)}
	if f.State != "" {
		st := string(f.State)
		p.State = &st
	}
	if f.PageToken != "" {
		c, err := decodeCursor(f.PageToken, fh)
		if err != nil || c.key == nil {
			return catalog.RunPage{}, ErrBadPageToken
		}
		v := *c.key // the value as ordered: negated when descending
		if !m.Ascending {
			v = -v
		}
		p.CursorValue, p.CursorCreatedAt, p.CursorID = &v, &c.t, &c.id
	}
	var rows []db.ListRunsByMetricAscRow
	var err error
	if m.Ascending {
		rows, err = s.lq.ListRunsByMetricAsc(ctx, p)
	} else {
		var desc []db.ListRunsByMetricDescRow
		desc, err = s.lq.ListRunsByMetricDesc(ctx, db.ListRunsByMetricDescParams{Project: p.Project, Pipeline: p.Pipeline,
			Step: p.Step, Metric: p.Metric, State: p.State, MinValue: p.MinValue, MaxValue: p.MaxValue,
			CursorValue: p.CursorValue, CursorCreatedAt: p.CursorCreatedAt, CursorID: p.CursorID, MaxRows: p.MaxRows})
		rows = make([]db.ListRunsByMetricAscRow, len(desc))
		for i, r := range desc {
			rows[i] = db.ListRunsByMetricAscRow(r)
		}
	}
	if err != nil {
		return catalog.RunPage{}, mapErr(err, "list runs of %q by metric", f.Project)
	}
	var page catalog.RunPage
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		key := last.MetricValue
		if !m.Ascending {
			key = -key
		}
		page.NextPageToken = encodeCursor(cursor{t: last.CreatedAt, id: last.ID, filter: fh, key: &key})
	}
	page.Runs = make([]catalog.Run, len(rows))
	for i, r := range rows {
		page.Runs[i] = summaryToRun(db.RunSummary{ID: r.ID, Project: r.Project, Pipeline: r.Pipeline, Version: r.Version,
			Workflow: r.Workflow, State: r.State, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CreatedBy: r.CreatedBy})
		v := r.MetricValue
		page.Runs[i].MetricValue = &v
	}
	return page, nil
}

// filterHash identifies a filter (everything but Limit and PageToken), so
// that a token is not replayed against another project or filter.
func filterHash(f catalog.RunFilter) string {
	h := sha256.New()
	ts := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return strconv.FormatInt(t.UnixMicro(), 10)
	}
	fmt.Fprintf(h, "%q %q %q %s %s", f.Project, f.Pipeline, f.State, ts(f.CreatedAfter), ts(f.CreatedBefore))
	if f.CreatedBy != "" { // absent when unset, so tokens issued before the filter existed stay valid
		fmt.Fprintf(h, " by %q", f.CreatedBy)
	}
	if f.Schedule != "" { // likewise
		fmt.Fprintf(h, " schedule %q", f.Schedule)
	}
	if m := f.ByMetric; m != nil {
		f := func(v *float64) string {
			if v == nil {
				return "-"
			}
			return strconv.FormatFloat(*v, 'g', -1, 64)
		}
		fmt.Fprintf(h, " metric %q %q %t %s %s", m.Step, m.Name, m.Ascending, f(m.Min), f(m.Max))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:9])
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(cursorJSON{V: 1, T: c.t.UnixMicro(), ID: c.id, F: c.filter, K: c.key})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(tok, filter string) (cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return cursor{}, ErrBadPageToken
	}
	var c cursorJSON
	if err := json.Unmarshal(b, &c); err != nil || c.V != 1 || c.ID == "" {
		return cursor{}, ErrBadPageToken
	}
	if c.F != filter {
		return cursor{}, fmt.Errorf("%w: issued for another filter", ErrBadPageToken)
	}
	return cursor{t: time.UnixMicro(c.T).UTC(), id: c.ID, filter: c.F, key: c.K}, nil
}

func toRun(r db.Run) (catalog.Run, error) {
	run := catalog.Run{
		ID:             r.ID,
		Project:        r.Project,
		Pipeline:       deref(r.Pipeline),
		Workflow:       r.Workflow,
		State:          runstate.State(r.State),
		CreatedAt:      utc(r.CreatedAt),
		UpdatedAt:      utc(r.UpdatedAt),
		CreatedBy:      r.CreatedBy,
		IdempotencyKey: deref(r.IdempotencyKey),
		RequestHash:    r.RequestHash,
		Input:          r.Input,
	}
	if r.Version != nil {
		run.Version = int(*r.Version)
	}
	if len(r.Status) > 0 {
		var st runstate.Status
		if err := json.Unmarshal(r.Status, &st); err != nil {
			return catalog.Run{}, fmt.Errorf("run %s/%s: decoding status: %v", r.Project, r.ID, err)
		}
		run.Status = &st
	}
	return run, nil
}

// ListUnfinishedRuns returns up to limit runs of any project that are not
// in a terminal state and have not changed since before, oldest first,
// after the run at key after (the zero key: from the first). The
// reconciler pages through them a sweep at a time, so that runs which stay
// in flight for long do not keep the others from ever being checked.
// Served by a partial index.
func (s *Store) ListUnfinishedRuns(ctx context.Context, before time.Time, after catalog.RunKey, limit int) ([]catalog.Run, error) {
	rows, err := s.q.ListUnfinishedRuns(ctx, db.ListUnfinishedRunsParams{
		Before: before, AfterAt: after.UpdatedAt, AfterID: after.ID, MaxRows: int32(limit)})
	if err != nil {
		return nil, mapErr(err, "list unfinished runs")
	}
	out := make([]catalog.Run, 0, len(rows))
	for _, r := range rows {
		run, err := toRun(r)
		if err != nil {
			return nil, err
		}
		out = append(out, run)
	}
	return out, nil
}

// EndedRuns returns which of ids the catalogue shows as ended (any terminal
// state, TERMINATED included); ids it does not know are not returned.
func (s *Store) EndedRuns(ctx context.Context, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	out, err := s.q.EndedRuns(ctx, ids)
	if err != nil {
		return nil, mapErr(err, "find ended runs")
	}
	return out, nil
}
