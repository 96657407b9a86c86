package store

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
)

// CreateWebhook stores w. A project that already has maxPerProject
// webhooks is ErrConflict; an unknown project is ErrNotFound.
func (s *Store) CreateWebhook(ctx context.Context, w catalog.Webhook, maxPerProject int) (catalog.Webhook, error) {
	if w.ID == "" {
		w.ID = newID("wh-")
	}
	if w.Project == "" || w.URL == "" || len(w.Events) == 0 || w.Secret == "" {
		return catalog.Webhook{}, invalid("a webhook needs a project, a URL, events and a secret")
	}
	stored, err := s.sealWebhookSecret(ctx, w.ID, w.Secret)
	if err != nil {
		return catalog.Webhook{}, err
	}
	row, err := s.q.CreateWebhook(ctx, db.CreateWebhookParams{
		ID: w.ID, Project: w.Project, Url: w.URL, Events: w.Events, Pipeline: strPtr(w.Pipeline),
		Secret: stored, Description: w.Description, Enabled: w.Enabled, IncludeOutput: w.IncludeOutput, CreatedBy: w.CreatedBy,
		MaxPerProject: int32(maxPerProject),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return catalog.Webhook{}, fmt.Errorf("create webhook in %q: %w: %d webhooks already", w.Project, catalog.ErrConflict, maxPerProject)
	}
	if err != nil {
		return catalog.Webhook{}, mapErr(err, "create webhook in %q", w.Project)
	}
	out := toWebhook(row)
	out.Secret = w.Secret
	return out, nil
}

// GetWebhook returns a webhook of project; another project's is ErrNotFound.
func (s *Store) GetWebhook(ctx context.Context, project, id string) (catalog.Webhook, error) {
	row, err := s.q.GetWebhook(ctx, db.GetWebhookParams{Project: project, ID: id})
	if err != nil {
		return catalog.Webhook{}, mapErr(err, "webhook %s/%s", project, id)
	}
	return toWebhook(row), nil
}

// ListWebhooks returns the project's webhooks, oldest first.
func (s *Store) ListWebhooks(ctx context.Context, project string) ([]catalog.Webhook, error) {
	rows, err := s.q.ListWebhooks(ctx, project)
	if err != nil {
		return nil, mapErr(err, "list webhooks of %q", project)
	}
	out := make([]catalog.Webhook, len(rows))
	for i, r := range rows {
		out[i] = toWebhook(r)
	}
	return out, nil
}

// UpdateWebhook changes the fields u sets; another project's webhook is
// ErrNotFound.
func (s *Store) UpdateWebhook(ctx context.Context, project, id string, u catalog.WebhookUpdate) (catalog.Webhook, error) {
	secret := u.Secret
	if secret != nil {
		stored, err := s.sealWebhookSecret(ctx, id, *secret)
		if err != nil {
			return catalog.Webhook{}, err
		}
		secret = &stored
	}
	row, err := s.q.UpdateWebhook(ctx, db.UpdateWebhookParams{
		Url: u.URL, Events: u.Events, ClearPipeline: u.ClearPipeline, Pipeline: u.Pipeline,
		Secret: secret, Description: u.Description, Enabled: u.Enabled, IncludeOutput: u.IncludeOutput, Project: project, ID: id,
	})
	if err != nil {
		return catalog.Webhook{}, mapErr(err, "update webhook %s/%s", project, id)
	}
	return toWebhook(row), nil
}

// DeleteWebhook deletes a webhook of project and its deliveries.
func (s *Store) DeleteWebhook(ctx context.Context, project, id string) error {
	n, err := s.q.DeleteWebhook(ctx, db.DeleteWebhookParams{Project: project, ID: id})
	if err != nil {
		return mapErr(err, "delete webhook %s/%s", project, id)
	}
	if n == 0 {
		return mapErr(catalog.ErrNotFound, "delete webhook %s/%s", project, id)
	}
	return nil
}

// Page sizes of ListWebhookDeliveries.
const (
	DefaultDeliveryPageSize = 50
	MaxDeliveryPageSize     = 200
)

// ListWebhookDeliveries returns one page of the delivery log of a webhook
// of project, newest first, each delivery with its attempts. A page token
// not issued for this webhook is ErrBadPageToken.
func (s *Store) ListWebhookDeliveries(ctx context.Context, project, id string, limit int, pageToken string) (catalog.WebhookDeliveryPage, error) {
	if _, err := s.GetWebhook(ctx, project, id); err != nil {
		return catalog.WebhookDeliveryPage{}, err
	}
	if limit <= 0 {
		limit = DefaultDeliveryPageSize
	}
	limit = min(limit, MaxDeliveryPageSize)
	p := db.ListWebhookDeliveriesParams{WebhookID: id, MaxRows: int32(limit + 1)}
	if pageToken != "" {
		c, err := decodeDeliveryCursor(pageToken, id)
		if err != nil {
			return catalog.WebhookDeliveryPage{}, err
		}
		p.CursorCreatedAt, p.CursorID = &c.t, &c.id
	}
	rows, err := s.q.ListWebhookDeliveries(ctx, p)
	if err != nil {
		return catalog.WebhookDeliveryPage{}, mapErr(err, "list deliveries of webhook %s", id)
	}
	var page catalog.WebhookDeliveryPage
	if len(rows) > limit {
		rows = rows[:limit]
		last := rows[limit-1]
		page.NextPageToken = encodeDeliveryCursor(last.CreatedAt, last.ID, id)
	}
	ids := make([]string, len(rows))
	byID := map[string]int{}
	page.Deliveries = make([]catalog.WebhookDelivery, len(rows))
	for i, r := range rows {
		ids[i], byID[r.ID] = r.ID, i
		d := catalog.WebhookDelivery{
			ID: r.ID, WebhookID: r.WebhookID, RunID: r.RunID, EventID: r.EventID, Event: r.Event,
			Step: deref(r.Step), State: r.State, Attempts: int(r.Attempts), LastError: r.LastError,
			CreatedAt: utc(r.CreatedAt), FinishedAt: r.FinishedAt,
		}
		if r.State == catalog.DeliveryPending {
			t := utc(r.NextAttemptAt)
			d.NextAttemptAt = &t
		}
		if r.LastStatus != nil {
			v := int(*r.LastStatus)
			d.LastStatus = &v
		}
		page.Deliveries[i] = d
	}
	if len(ids) == 0 {
		return page, nil
	}
	attempts, err := s.q.ListWebhookAttempts(ctx, ids)
	if err != nil {
		return catalog.WebhookDeliveryPage{}, mapErr(err, "list attempts of webhook %s", id)
	}
	for _, a := range attempts {
		d := &page.Deliveries[byID[a.DeliveryID]]
		wa := catalog.WebhookAttempt{Attempt: int(a.Attempt), StartedAt: utc(a.StartedAt),
			Duration: time.Duration(a.DurationMs) * time.Millisecond, Error: a.Error}
		if a.StatusCode != nil {
			v := int(*a.StatusCode)
			wa.StatusCode = &v
		}
		d.Log = append(d.Log, wa)
	}
	return page, nil
}

type deliveryCursor struct {
	T  int64  `json:"t"`
	ID string `json:"i"`
	W  string `json:"w"`
}

func encodeDeliveryCursor(t time.Time, id, webhook string) string {
	b, _ := json.Marshal(deliveryCursor{T: t.UnixMicro(), ID: id, W: webhook})
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeDeliveryCursor(tok, webhook string) (struct {
	t  time.Time
	id string
}, error) {
	var out struct {
		t  time.Time
		id string
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	var c deliveryCursor
	if err != nil || json.Unmarshal(b, &c) != nil || c.ID == "" {
		return out, ErrBadPageToken
	}
	if c.W != webhook {
		return out, fmt.Errorf("%w: issued for another webhook", ErrBadPageToken)
	}
	out.t, out.id = time.UnixMicro(c.T).UTC(), c.ID
	return out, nil
}

// ClaimWebhookDeliveries leases up to max due deliveries to owner until
// leaseUntil and counts the attempt about to be made (the dispatcher's
// read of the outbox).
func (s *Store) ClaimWebhookDeliveries(ctx context.Context, owner string, now, leaseUntil time.Time, max int) ([]catalog.ClaimedDelivery, error) {
	rows, err := s.q.ClaimWebhookDeliveries(ctx, db.ClaimWebhookDeliveriesParams{
		Owner: &owner, LeaseUntil: &leaseUntil, Now: now, MaxRows: int32(max),
	})
	if err != nil {
		return nil, mapErr(err, "claim webhook deliveries")
	}
	out := make([]catalog.ClaimedDelivery, len(rows))
	for i, r := range rows {
		secret, err := s.openWebhookSecret(ctx, r.WebhookID, r.Secret)
		if err != nil {
			return nil, err
		}
		out[i] = catalog.ClaimedDelivery{ID: r.ID, Event: r.Event, EventID: r.EventID, Attempt: int(r.Attempts),
			Payload: []byte(r.Payload), URL: r.Url, Secret: secret}
	}
	return out, nil
}

// RecordWebhookAttempt logs an attempt and moves its delivery on, if
// r.Owner still holds the delivery's lease for that attempt (else the
// attempt is dropped: another gateway has taken the delivery over).
func (s *Store) RecordWebhookAttempt(ctx context.Context, r catalog.AttemptResult) error {
	p := db.RecordWebhookAttemptParams{
		Attempt: int32(r.Attempt), StartedAt: r.StartedAt, DurationMs: int32(r.Duration.Milliseconds()),
		Error: r.Error, State: r.State, NextAttemptAt: r.NextAttemptAt, DeliveryID: r.DeliveryID, Owner: &r.Owner,
	}
	if r.StatusCode != nil {
		v := int32(*r.StatusCode)
		p.StatusCode = &v
	}
	_, err := s.q.RecordWebhookAttempt(ctx, p)
	return mapErr(err, "record attempt %d of delivery %s", r.Attempt, r.DeliveryID)
}

// DeleteFinishedWebhookDeliveries deletes up to max deliveries that ended
// before before.
func (s *Store) DeleteFinishedWebhookDeliveries(ctx context.Context, before time.Time, max int) (int64, error) {
	n, err := s.q.DeleteFinishedWebhookDeliveries(ctx, db.DeleteFinishedWebhookDeliveriesParams{Before: before, MaxRows: int32(max)})
	return n, mapErr(err, "prune webhook deliveries")
}

func toWebhook(r db.Webhook) catalog.Webhook {
	return catalog.Webhook{
		ID: r.ID, Project: r.Project, URL: r.Url, Events: r.Events, Pipeline: deref(r.Pipeline),
		Secret: clearOnly(r.Secret), Description: r.Description, Enabled: r.Enabled, IncludeOutput: r.IncludeOutput,
		CreatedAt: utc(r.CreatedAt), UpdatedAt: utc(r.UpdatedAt), CreatedBy: r.CreatedBy,
	}
}

// clearOnly is a stored webhook secret as catalog.Webhook shows it: a
// sealed one is not opened for reads that never serve it.
func clearOnly(stored string) string {
	if strings.HasPrefix(stored, sealedPrefix) {
		return ""
	}
	return stored
}
