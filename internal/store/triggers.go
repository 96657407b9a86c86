package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
	"github.com/atelier-ml/atelier/runstate"
)

// Page sizes of ListTriggerFirings.
const (
	DefaultFiringPageSize = 50
	MaxFiringPageSize     = 200
)

func triggerOwner(id string) string { return "trigger/" + id }

// CreateTrigger stores t (a hook's secret sealed like a webhook's). A
// taken name is ErrConflict; a project that already has maxPerProject
// triggers is ErrInvalidArgument; an unknown project is ErrNotFound.
func (s *Store) CreateTrigger(ctx context.Context, t catalog.Trigger, maxPerProject int) (catalog.Trigger, error) {
	if t.ID == "" {
		t.ID = newID("trg-")
	}
	if t.Project == "" || t.Name == "" || t.Pipeline == "" || (t.Kind != catalog.TriggerRun && t.Kind != catalog.TriggerHook) {
		return catalog.Trigger{}, invalid("a trigger needs a project, a name, a kind and a pipeline")
	}
	stored := ""
	if t.Kind == catalog.TriggerHook {
		if t.Secret == "" {
			return catalog.Trigger{}, invalid("a hook trigger needs a secret")
		}
		var err error
		if stored, err = s.sealSecretFor(ctx, triggerOwner(t.ID), t.Secret); err != nil {
			return catalog.Trigger{}, err
		}
	}
	params, err := json.Marshal(t.Params)
	if err != nil {
		return catalog.Trigger{}, invalid("trigger params: %v", err)
	}
	p := db.CreateTriggerParams{
		ID: t.ID, Project: t.Project, Name: t.Name, Kind: t.Kind, Pipeline: t.Pipeline, Params: params,
		Secret: stored, MaxPerMinute: int32(t.MaxPerMinute), Enabled: t.Enabled, Description: t.Description,
		CreatedBy: t.CreatedBy, MaxPerProject: int32(maxPerProject),
	}
	if t.Kind == catalog.TriggerRun {
		p.OnPipeline = &t.OnPipeline
		for _, st := range t.OnStates {
			p.OnStates = append(p.OnStates, string(st))
		}
	}
	if t.Version > 0 {
		v := int32(t.Version)
		p.Version = &v
	}
	row, err := s.q.CreateTrigger(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return catalog.Trigger{}, fmt.Errorf("create trigger in %q: %w: %d triggers already", t.Project, catalog.ErrInvalidArgument, maxPerProject)
	}
	if err != nil {
		return catalog.Trigger{}, mapErr(err, "create trigger %s/%s", t.Project, t.Name)
	}
	out, err := toTrigger(row)
	out.Secret = t.Secret
	return out, err
}

// GetTrigger returns a trigger of project by name (its secret left out).
func (s *Store) GetTrigger(ctx context.Context, project, name string) (catalog.Trigger, error) {
	row, err := s.q.GetTrigger(ctx, db.GetTriggerParams{Project: project, Name: name})
	if err != nil {
		return catalog.Trigger{}, mapErr(err, "trigger %s/%s", project, name)
	}
	return toTrigger(row)
}

// TriggerSecret opens a hook trigger's HMAC key.
func (s *Store) TriggerSecret(ctx context.Context, t catalog.Trigger) (string, error) {
	row, err := s.q.GetTrigger(ctx, db.GetTriggerParams{Project: t.Project, Name: t.Name})
	if err != nil {
		return "", mapErr(err, "trigger %s/%s", t.Project, t.Name)
	}
	if row.ID != t.ID {
		return "", fmt.Errorf("trigger %s/%s: %w: replaced meanwhile", t.Project, t.Name, catalog.ErrNotFound)
	}
	return s.openSecretFor(ctx, triggerOwner(row.ID), row.Secret)
}

// ListTriggers returns the project's triggers by name.
func (s *Store) ListTriggers(ctx context.Context, project string) ([]catalog.Trigger, error) {
	rows, err := s.q.ListTriggers(ctx, project)
	if err != nil {
		return nil, mapErr(err, "list triggers of %q", project)
	}
	out := make([]catalog.Trigger, len(rows))
	for i, r := range rows {
		if out[i], err = toTrigger(r); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SetTriggerEnabled enables or disables a trigger.
func (s *Store) SetTriggerEnabled(ctx context.Context, project, name string, enabled bool) (catalog.Trigger, error) {
	row, err := s.q.SetTriggerEnabled(ctx, db.SetTriggerEnabledParams{Project: project, Name: name, Enabled: enabled})
	if err != nil {
		return catalog.Trigger{}, mapErr(err, "trigger %s/%s", project, name)
	}
	return toTrigger(row)
}

// DeleteTrigger deletes a trigger and its firings.
func (s *Store) DeleteTrigger(ctx context.Context, project, name string) error {
	n, err := s.q.DeleteTrigger(ctx, db.DeleteTriggerParams{Project: project, Name: name})
	if err != nil {
		return mapErr(err, "delete trigger %s/%s", project, name)
	}
	if n == 0 {
		return fmt.Errorf("trigger %s/%s: %w", project, name, catalog.ErrNotFound)
	}
	return nil
}

// QueueHookFiring queues f unless its source was queued for the trigger
// before.
func (s *Store) QueueHookFiring(ctx context.Context, f catalog.TriggerFiring) (bool, error) {
	n, err := s.q.InsertTriggerFiring(ctx, db.InsertTriggerFiringParams{
		ID: f.ID, TriggerID: f.TriggerID, Project: f.Project, Source: f.Source, Payload: jsonbSafe(f.Payload),
	})
	if err != nil {
		return false, mapErr(err, "queue firing of trigger %s", f.TriggerID)
	}
	return n > 0, nil
}

// ListTriggerFirings returns a page of a trigger's firings, newest first.
func (s *Store) ListTriggerFirings(ctx context.Context, triggerID string, limit int, pageToken string) (catalog.TriggerFiringPage, error) {
	if limit <= 0 {
		limit = DefaultFiringPageSize
	}
	limit = min(limit, MaxFiringPageSize)
	p := db.ListTriggerFiringsParams{TriggerID: triggerID, MaxRows: int32(limit + 1)}
	if pageToken != "" {
		c, err := decodeDeliveryCursor(pageToken, triggerID)
		if err != nil {
			return catalog.TriggerFiringPage{}, err
		}
		p.CursorCreatedAt, p.CursorID = &c.t, &c.id
	}
	rows, err := s.q.ListTriggerFirings(ctx, p)
	if err != nil {
		return catalog.TriggerFiringPage{}, mapErr(err, "list firings of trigger %s", triggerID)
	}
	var page catalog.TriggerFiringPage
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		page.NextPageToken = encodeDeliveryCursor(last.CreatedAt, last.ID, triggerID)
	}
	page.Firings = make([]catalog.TriggerFiring, len(rows))
	for i, r := range rows {
		f := catalog.TriggerFiring{
			ID: r.ID, TriggerID: r.TriggerID, Project: r.Project, Source: r.Source, Payload: json.RawMessage(r.Payload),
			State: r.State, Attempts: int(r.Attempts), RunID: deref(r.RunID), Error: r.Error,
			CreatedAt: utc(r.CreatedAt), FinishedAt: r.FinishedAt,
		}
		if r.State == catalog.FiringPending {
			t := utc(r.NextAttemptAt)
			f.NextAttemptAt = &t
		}
		if len(r.Params) > 0 {
			if err := json.Unmarshal(r.Params, &f.Params); err != nil {
				return catalog.TriggerFiringPage{}, fmt.Errorf("firing %s params: %w", r.ID, err)
			}
		}
		page.Firings[i] = f
	}
	return page, nil
}

// ClaimTriggerFirings leases up to max due firings to owner until
// leaseUntil (see the query).
func (s *Store) ClaimTriggerFirings(ctx context.Context, owner string, now, leaseUntil time.Time, max int) ([]catalog.ClaimedFiring, error) {
	rows, err := s.q.ClaimTriggerFirings(ctx, db.ClaimTriggerFiringsParams{Owner: &owner, LeaseUntil: &leaseUntil, Now: now, MinuteAgo: now.Add(-time.Minute), MaxRows: int32(max)})
	if err != nil {
		return nil, mapErr(err, "claim trigger firings")
	}
	out := make([]catalog.ClaimedFiring, len(rows))
	for i, r := range rows {
		c := catalog.ClaimedFiring{
			ID: r.ID, TriggerID: r.TriggerID, Trigger: r.Name, Kind: r.Kind, Project: r.Project, Source: r.Source,
			Payload: json.RawMessage(r.Payload), Attempt: int(r.Attempts), Pipeline: r.Pipeline,
		}
		if r.Version != nil {
			c.Version = int(*r.Version)
		}
		if err := json.Unmarshal(r.Params, &c.Params); err != nil {
			return nil, fmt.Errorf("trigger %s params: %w", r.TriggerID, err)
		}
		out[i] = c
	}
	return out, nil
}

// RecordTriggerFiring ends an attempt; a lease lost meanwhile writes
// nothing (and is not an error: the firing's next attempt finds its run).
func (s *Store) RecordTriggerFiring(ctx context.Context, r catalog.FiringResult) error {
	p := db.RecordTriggerFiringParams{
		ID: r.ID, Owner: &r.Owner, Attempt: int32(r.Attempt), State: r.State, Error: r.Error, NextAttemptAt: r.NextAttemptAt,
	}
	if r.RunID != "" {
		p.RunID = &r.RunID
	}
	if r.Params != nil {
		b, err := json.Marshal(r.Params)
		if err != nil {
			return invalid("firing params: %v", err)
		}
		p.Params = jsonbSafe(b)
	}
	_, err := s.q.RecordTriggerFiring(ctx, p)
	return mapErr(err, "record firing %s", r.ID)
}

// DeleteFinishedTriggerFirings prunes firings that ended before before.
func (s *Store) DeleteFinishedTriggerFirings(ctx context.Context, before time.Time, max int) (int64, error) {
	n, err := s.q.DeleteFinishedTriggerFirings(ctx, db.DeleteFinishedTriggerFiringsParams{Before: before, MaxRows: int32(max)})
	return n, mapErr(err, "prune trigger firings")
}

func toTrigger(r db.Trigger) (catalog.Trigger, error) {
	t := catalog.Trigger{
		ID: r.ID, Project: r.Project, Name: r.Name, Kind: r.Kind, OnPipeline: deref(r.OnPipeline), Pipeline: r.Pipeline,
		MaxPerMinute: int(r.MaxPerMinute), Enabled: r.Enabled, Description: r.Description,
		CreatedAt: utc(r.CreatedAt), CreatedBy: r.CreatedBy,
	}
	for _, st := range r.OnStates {
		t.OnStates = append(t.OnStates, runstate.State(st))
	}
	if r.Version != nil {
		t.Version = int(*r.Version)
	}
	if err := json.Unmarshal(r.Params, &t.Params); err != nil {
		return t, fmt.Errorf("trigger %s params: %w", r.ID, err)
	}
	return t, nil
}
