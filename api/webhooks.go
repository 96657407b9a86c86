package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/webhooks"
)

// Webhooks is the catalogue of webhooks and their delivery logs (the
// Postgres store implements it); every method is scoped by project, so
// another tenant's webhook is not found. CreateWebhook returns
// ErrWebhookLimit when the project has MaxWebhooksPerProject.
type Webhooks interface {
	CreateWebhook(ctx context.Context, w catalog.Webhook, maxPerProject int) (catalog.Webhook, error)
	GetWebhook(ctx context.Context, project, id string) (catalog.Webhook, error)
	ListWebhooks(ctx context.Context, project string) ([]catalog.Webhook, error)
	UpdateWebhook(ctx context.Context, project, id string, u catalog.WebhookUpdate) (catalog.Webhook, error)
	DeleteWebhook(ctx context.Context, project, id string) error
	ListWebhookDeliveries(ctx context.Context, project, id string, limit int, pageToken string) (catalog.WebhookDeliveryPage, error)
}

// MaxWebhooksPerProject bounds a project's webhooks: every event is
// delivered to each matching one.
const MaxWebhooksPerProject = 50

// WithWebhooks serves /webhooks through w; allowPrivate lets webhook URLs
// name loopback and private addresses (the dispatcher's setting, so a URL
// it would refuse is refused when stored).
func WithWebhooks(w Webhooks, allowPrivate bool) Option {
	return func(s *server) { s.webhooks, s.webhookAllowPrivate = w, allowPrivate }
}

var (
	ptInvalidWebhook  = problemType{"invalid-webhook", "Invalid webhook", http.StatusUnprocessableEntity}
	webhookPipelineRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$`)
)

const (
	// reservedSecretPrefix starts the stored form of a sealed signing
	// secret (internal/store): a secret chosen with it would read as a
	// sealed one.
	reservedSecretPrefix = "sealed:"
	minWebhookSecret     = 16
	maxWebhookSecret     = 256
)

func (s *server) webhooksOn() error {
	if s.webhooks == nil {
		return newProblem(ptUnavailable, "webhooks are not served by this gateway")
	}
	return nil
}

// CreateWebhook stores a webhook; a generated secret is returned once.
func (s *server) CreateWebhook(ctx context.Context, req gen.CreateWebhookRequestObject) (gen.CreateWebhookResponseObject, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	b := deref(req.Body)
	var fields []gen.FieldError
	bad := func(path, format string, args ...any) {
		fields = append(fields, gen.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if why := webhooks.CheckURL(b.Url, s.webhookAllowPrivate); why != "" {
		bad("url", "%s", why)
	}
	events := checkEvents(b.Events, "events", bad)
	if b.Pipeline != nil && !webhookPipelineRE.MatchString(*b.Pipeline) {
		bad("pipeline", "not a pipeline or Go workflow name")
	}
	secret, generated := deref(b.Secret), b.Secret == nil
	if generated {
		secret = newWebhookSecret()
	} else if n := len(secret); n < minWebhookSecret || n > maxWebhookSecret {
		bad("secret", "must be %d to %d characters, got %d", minWebhookSecret, maxWebhookSecret, n)
	} else if strings.HasPrefix(secret, reservedSecretPrefix) {
		bad("secret", "must not start with %q: Atelier marks sealed secrets with it", reservedSecretPrefix)
	}
	if len(fields) > 0 {
		return nil, newProblem(ptInvalidWebhook, "%s", summarize(fields)).withErrors(fields)
	}
	w, err := s.webhooks.CreateWebhook(ctx, catalog.Webhook{
		ID: "wh-" + s.newID(), Project: req.Project, URL: b.Url, Events: events, Pipeline: deref(b.Pipeline),
		Secret: secret, Description: deref(b.Description), Enabled: b.Enabled == nil || *b.Enabled,
		IncludeOutput: deref(b.IncludeStepOutput), CreatedBy: principal(ctx).Name,
	}, MaxWebhooksPerProject)
	switch {
	case errors.Is(err, catalog.ErrConflict):
		return nil, newProblem(ptInvalidWebhook, "project %q already has %d webhooks, the most it may have", req.Project, MaxWebhooksPerProject)
	case errors.Is(err, catalog.ErrNotFound):
		return nil, notFound("project %q not found", req.Project)
	case err != nil:
		return nil, internalError(err)
	}
	out := gen.CreatedWebhook{Webhook: webhookView(w)}
	if generated {
		out.Secret = &secret
	}
	return gen.CreateWebhook201JSONResponse{
		Body: out,
		// The secret must not linger in caches or proxies.
		Headers: gen.CreateWebhook201ResponseHeaders{CacheControl: "no-store", Location: s.webhookPath(w)},
	}, nil
}

func checkEvents(in []gen.WebhookEvent, path string, bad func(path, format string, args ...any)) []string {
	var out []string
	for i, e := range in {
		switch {
		case !slices.Contains(catalog.WebhookEvents, string(e)):
			bad(fmt.Sprintf("%s[%d]", path, i), "unknown event %q", e)
		case slices.Contains(out, string(e)):
			bad(fmt.Sprintf("%s[%d]", path, i), "duplicate event %q", e)
		default:
			out = append(out, string(e))
		}
	}
	if len(in) == 0 {
		bad(path, "give at least one event")
	}
	return out
}

// newWebhookSecret is 32 random bytes, hex.
func newWebhookSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "whsec_" + hex.EncodeToString(b[:])
}

// ListWebhooks lists the project's webhooks.
func (s *server) ListWebhooks(ctx context.Context, req gen.ListWebhooksRequestObject) (gen.ListWebhooksResponseObject, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	ws, err := s.webhooks.ListWebhooks(ctx, req.Project)
	if err != nil {
		return nil, internalError(err)
	}
	out := gen.WebhookList{Items: make([]gen.Webhook, len(ws))}
	for i, w := range ws {
		out.Items[i] = webhookView(w)
	}
	return gen.ListWebhooks200JSONResponse(out), nil
}

// GetWebhook reads one webhook.
func (s *server) GetWebhook(ctx context.Context, req gen.GetWebhookRequestObject) (gen.GetWebhookResponseObject, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	w, err := s.webhooks.GetWebhook(ctx, req.Project, req.Webhook)
	if err != nil {
		return nil, webhookErr(req.Project, req.Webhook, err)
	}
	return gen.GetWebhook200JSONResponse(webhookView(w)), nil
}

// UpdateWebhook changes the fields given.
func (s *server) UpdateWebhook(ctx context.Context, req gen.UpdateWebhookRequestObject) (gen.UpdateWebhookResponseObject, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	b := deref(req.Body)
	var fields []gen.FieldError
	bad := func(path, format string, args ...any) {
		fields = append(fields, gen.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	u := catalog.WebhookUpdate{URL: b.Url, Secret: b.Secret, Description: b.Description, Enabled: b.Enabled, IncludeOutput: b.IncludeStepOutput}
	if b.Url != nil {
		if why := webhooks.CheckURL(*b.Url, s.webhookAllowPrivate); why != "" {
			bad("url", "%s", why)
		}
	}
	if b.Events != nil {
		u.Events = checkEvents(*b.Events, "events", bad)
	}
	switch p := b.Pipeline; {
	case p == nil:
	case *p == "":
		u.ClearPipeline = true
	case !webhookPipelineRE.MatchString(*p):
		bad("pipeline", "not a pipeline or Go workflow name")
	default:
		u.Pipeline = p
	}
	if b.Secret != nil {
		if n := len(*b.Secret); n < minWebhookSecret || n > maxWebhookSecret {
			bad("secret", "must be %d to %d characters, got %d", minWebhookSecret, maxWebhookSecret, n)
		} else if strings.HasPrefix(*b.Secret, reservedSecretPrefix) {
			bad("secret", "must not start with %q: Atelier marks sealed secrets with it", reservedSecretPrefix)
		}
	}
	if len(fields) > 0 {
		return nil, newProblem(ptInvalidWebhook, "%s", summarize(fields)).withErrors(fields)
	}
	w, err := s.webhooks.UpdateWebhook(ctx, req.Project, req.Webhook, u)
	if err != nil {
		return nil, webhookErr(req.Project, req.Webhook, err)
	}
	return gen.UpdateWebhook200JSONResponse(webhookView(w)), nil
}

// DeleteWebhook deletes a webhook and its delivery log.
func (s *server) DeleteWebhook(ctx context.Context, req gen.DeleteWebhookRequestObject) (gen.DeleteWebhookResponseObject, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	if err := s.webhooks.DeleteWebhook(ctx, req.Project, req.Webhook); err != nil {
		return nil, webhookErr(req.Project, req.Webhook, err)
	}
	return gen.DeleteWebhook204Response{}, nil
}

// ListWebhookDeliveries serves a page of the delivery log.
func (s *server) ListWebhookDeliveries(ctx context.Context, req gen.ListWebhookDeliveriesRequestObject) (gen.ListWebhookDeliveriesResponseObject, error) {
	if err := s.webhooksOn(); err != nil {
		return nil, err
	}
	page, err := s.webhooks.ListWebhookDeliveries(ctx, req.Project, req.Webhook, derefOr(req.Params.PageSize, 50), deref(req.Params.PageToken))
	if errors.Is(err, catalog.ErrInvalidArgument) {
		fe := []gen.FieldError{{Path: "query.pageToken", Message: "not a page token of this webhook's deliveries"}}
		return nil, newProblem(ptInvalid, "%s", summarize(fe)).withErrors(fe)
	}
	if err != nil {
		return nil, webhookErr(req.Project, req.Webhook, err)
	}
	out := gen.WebhookDeliveryList{Items: make([]gen.WebhookDelivery, len(page.Deliveries))}
	for i, d := range page.Deliveries {
		out.Items[i] = deliveryView(d)
	}
	if page.NextPageToken != "" {
		out.NextPageToken = &page.NextPageToken
	}
	return gen.ListWebhookDeliveries200JSONResponse(out), nil
}

func webhookErr(project, id string, err error) error {
	if errors.Is(err, catalog.ErrNotFound) {
		return notFound("webhook %s not found in project %q", id, project)
	}
	return internalError(err)
}

func (s *server) webhookPath(w catalog.Webhook) string {
	return s.publicURL + fmt.Sprintf("/v1/projects/%s/webhooks/%s", w.Project, w.ID)
}

func webhookView(w catalog.Webhook) gen.Webhook {
	out := gen.Webhook{
		Id: w.ID, Project: w.Project, Url: w.URL, Enabled: w.Enabled,
		CreatedAt: w.CreatedAt.UTC(), UpdatedAt: w.UpdatedAt.UTC(),
		Events: make([]gen.WebhookEvent, len(w.Events)),
	}
	for i, e := range w.Events {
		out.Events[i] = gen.WebhookEvent(e)
	}
	if w.Pipeline != "" {
		out.Pipeline = &w.Pipeline
	}
	if w.Description != "" {
		out.Description = &w.Description
	}
	if w.CreatedBy != "" {
		out.CreatedBy = &w.CreatedBy
	}
	if w.IncludeOutput {
		out.IncludeStepOutput = &w.IncludeOutput
	}
	return out
}

func deliveryView(d catalog.WebhookDelivery) gen.WebhookDelivery {
	out := gen.WebhookDelivery{
		Id: d.ID, RunId: d.RunID, EventId: d.EventID, Event: gen.WebhookEvent(d.Event),
		State: gen.WebhookDeliveryState(d.State), Attempts: d.Attempts, CreatedAt: d.CreatedAt.UTC(),
		LastStatusCode: d.LastStatus, Log: make([]gen.WebhookAttempt, len(d.Log)),
	}
	if d.Step != "" {
		out.Step = &d.Step
	}
	if d.LastError != "" {
		out.LastError = &d.LastError
	}
	if d.State == catalog.DeliveryPending && d.NextAttemptAt != nil {
		t := d.NextAttemptAt.UTC()
		out.NextAttemptAt = &t
	}
	if d.FinishedAt != nil {
		t := d.FinishedAt.UTC()
		out.FinishedAt = &t
	}
	for i, a := range d.Log {
		out.Log[i] = gen.WebhookAttempt{Attempt: a.Attempt, StartedAt: a.StartedAt.UTC(), DurationMs: int(a.Duration.Milliseconds()), StatusCode: a.StatusCode}
		if a.Error != "" {
			out.Log[i].Error = &a.Error
		}
	}
	return out
}
