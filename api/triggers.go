package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/services/triggers"
	"github.com/atelier-ml/atelier/internal/services/webhooks"
	"github.com/atelier-ml/atelier/pipeline"
	"github.com/atelier-ml/atelier/runstate"
	"github.com/atelier-ml/atelier/schema"
)

// Triggers is the catalogue of triggers and their firings (the Postgres
// store implements it); every method is scoped by project. CreateTrigger
// returns catalog.ErrConflict for a taken name and
// catalog.ErrInvalidArgument when the project has maxPerProject.
type Triggers interface {
	CreateTrigger(ctx context.Context, t catalog.Trigger, maxPerProject int) (catalog.Trigger, error)
	GetTrigger(ctx context.Context, project, name string) (catalog.Trigger, error)
	ListTriggers(ctx context.Context, project string) ([]catalog.Trigger, error)
	SetTriggerEnabled(ctx context.Context, project, name string, enabled bool) (catalog.Trigger, error)
	DeleteTrigger(ctx context.Context, project, name string) error
	ListTriggerFirings(ctx context.Context, triggerID string, limit int, pageToken string) (catalog.TriggerFiringPage, error)
	// TriggerSecret opens a hook trigger's HMAC key.
	TriggerSecret(ctx context.Context, t catalog.Trigger) (string, error)
	// QueueHookFiring queues f unless its source was queued for the
	// trigger before (queued false).
	QueueHookFiring(ctx context.Context, f catalog.TriggerFiring) (queued bool, err error)
}

// WithTriggers serves /triggers and /hooks through t.
func WithTriggers(t Triggers) Option { return func(s *server) { s.triggers = t } }

// Bounds of triggers.
const (
	MaxTriggersPerProject  = 100
	defaultTriggerPerMin   = 60
	maxHookBody            = 64 << 10
	maxHookDeliveryID      = 200
	hookSignaturePrefix    = "sha256="
	defaultTriggerFireList = 50
)

var (
	ptInvalidTrigger = problemType{"invalid-trigger", "Invalid trigger", http.StatusUnprocessableEntity}
	triggerNameRE    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	// The final states a run trigger can fire on.
	finalStates = []runstate.State{runstate.Succeeded, runstate.Failed, runstate.Cancelled, runstate.Terminated}
)

func (s *server) triggersOn() error {
	if s.triggers == nil {
		return newProblem(ptUnavailable, "triggers are not served by this gateway")
	}
	return nil
}

// CreateTrigger checks a trigger as a run start would check its run
// (the pipeline and version exist, the params are the pipeline's and
// their templates read the firing), so that a mistake is a 422 now and
// not a failed firing later, then stores it; a hook's secret is returned
// once.
func (s *server) CreateTrigger(ctx context.Context, req gen.CreateTriggerRequestObject) (gen.CreateTriggerResponseObject, error) {
	if err := s.triggersOn(); err != nil {
		return nil, err
	}
	b := deref(req.Body)
	var fields []gen.FieldError
	bad := func(path, format string, args ...any) {
		fields = append(fields, gen.FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	if !triggerNameRE.MatchString(b.Name) {
		bad("name", "must be a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63")
	}
	t := catalog.Trigger{
		ID: "trg-" + s.newID(), Project: req.Project, Name: b.Name, Pipeline: b.Pipeline, Version: deref(b.Version),
		Params: deref(b.Params), MaxPerMinute: derefOr(b.MaxPerMinute, defaultTriggerPerMin),
		Enabled: b.Enabled == nil || *b.Enabled, Description: deref(b.Description), CreatedBy: principal(ctx).Name,
	}
	if t.Params == nil {
		t.Params = map[string]any{}
	}
	root := ""
	switch on := b.On; {
	case (on.RunFinished == nil) == (on.Hook == nil):
		bad("on", "give exactly one of runFinished and hook")
	case on.RunFinished != nil:
		t.Kind, root = catalog.TriggerRun, "upstream"
		t.OnPipeline = on.RunFinished.Pipeline
		if !webhookPipelineRE.MatchString(t.OnPipeline) {
			bad("on.runFinished.pipeline", "not a pipeline name")
		} else if t.OnPipeline == b.Pipeline {
			bad("on.runFinished.pipeline", "a trigger cannot start the pipeline whose runs fire it (every run would start another)")
		}
		for i, st := range deref(on.RunFinished.States) {
			switch {
			case !slices.Contains(finalStates, runstate.State(st)):
				bad(fmt.Sprintf("on.runFinished.states[%d]", i), "%q is not a final state (SUCCEEDED, FAILED, CANCELLED, TERMINATED)", st)
			case slices.Contains(t.OnStates, runstate.State(st)):
				bad(fmt.Sprintf("on.runFinished.states[%d]", i), "duplicate state %q", st)
			default:
				t.OnStates = append(t.OnStates, runstate.State(st))
			}
		}
		if on.RunFinished.States == nil {
			t.OnStates = []runstate.State{runstate.Succeeded}
		} else if len(*on.RunFinished.States) == 0 {
			bad("on.runFinished.states", "give at least one state (or leave it out: SUCCEEDED)")
		}
	default:
		t.Kind, root = catalog.TriggerHook, "body"
		t.Secret = newHookSecret()
	}
	if t.MaxPerMinute < 1 || t.MaxPerMinute > 1000 {
		bad("maxPerMinute", "must be between 1 and 1000, got %d", t.MaxPerMinute)
	}
	if root != "" {
		for path, msg := range triggers.CheckParams(t.Params, root) {
			bad(path, "%s", msg)
		}
	}
	if len(t.Description) > 1000 {
		bad("description", "at most 1000 characters")
	}
	fields = append(fields, s.checkTriggerTarget(ctx, req.Project, &t)...)
	if len(fields) > 0 {
		slices.SortFunc(fields, func(a, b gen.FieldError) int { return strings.Compare(a.Path, b.Path) })
		return nil, newProblem(ptInvalidTrigger, "%s", summarize(fields)).withErrors(fields)
	}
	created, err := s.triggers.CreateTrigger(ctx, t, MaxTriggersPerProject)
	switch {
	case errors.Is(err, catalog.ErrConflict):
		return nil, newProblem(ptAlreadyExists, "project %q already has a trigger named %q", req.Project, t.Name)
	case errors.Is(err, catalog.ErrInvalidArgument):
		return nil, newProblem(ptInvalidTrigger, "project %q already has %d triggers, the most it may have", req.Project, MaxTriggersPerProject)
	case errors.Is(err, catalog.ErrNotFound):
		return nil, notFound("project %q not found", req.Project)
	case err != nil:
		return nil, internalError(err)
	}
	out := gen.CreatedTrigger{Trigger: s.triggerView(created)}
	if t.Kind == catalog.TriggerHook {
		out.Secret = &t.Secret
	}
	return gen.CreateTrigger201JSONResponse{
		Body:    out,
		Headers: gen.CreateTrigger201ResponseHeaders{CacheControl: "no-store", Location: s.publicURL + triggerPath(created)},
	}, nil
}

// checkTriggerTarget checks that what t starts exists and takes t's
// params: names the version declares, and literal values (no template)
// of the declared types.
func (s *server) checkTriggerTarget(ctx context.Context, project string, t *catalog.Trigger) []gen.FieldError {
	field := func(path, format string, args ...any) []gen.FieldError {
		return []gen.FieldError{{Path: path, Message: fmt.Sprintf(format, args...)}}
	}
	v, _, err := s.pipelineVersion(ctx, project, t.Pipeline, t.Version, true)
	switch {
	case errors.Is(err, catalog.ErrNotFound) && t.Version > 0:
		return field("version", "pipeline %q has no version %d", t.Pipeline, t.Version)
	case errors.Is(err, catalog.ErrNotFound):
		return field("pipeline", "pipeline %q not found in project %q", t.Pipeline, project)
	case err != nil:
		return field("pipeline", "cannot read pipeline %q: %v", t.Pipeline, err)
	}
	var spec pipeline.Spec
	if err := json.Unmarshal(v.Spec, &spec); err != nil {
		return field("pipeline", "pipeline %q version %d cannot be read: %v", t.Pipeline, v.Version, err)
	}
	var out []gen.FieldError
	literal := map[string]any{}
	names := make([]string, 0, len(t.Params))
	for name := range t.Params {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !slices.ContainsFunc(spec.Params, func(p pipeline.Param) bool { return p.Name == name }) {
			out = append(out, field("params."+name, "pipeline %q version %d has no param %q", t.Pipeline, v.Version, name)...)
			continue
		}
		if raw, _ := json.Marshal(t.Params[name]); !strings.Contains(string(raw), "{{") {
			literal[name] = t.Params[name]
		}
	}
	// Literal values are checked as a run would check them; required
	// params a template fills are checked when it fires.
	if _, err := pipeline.ResolveParams(&spec, literal); err != nil {
		var ve *schema.ValidationError
		if errors.As(err, &ve) {
			for _, p := range ve.Problems {
				if _, given := literal[strings.TrimPrefix(p.Path, "params.")]; given {
					out = append(out, gen.FieldError{Path: p.Path, Message: p.Message})
				}
			}
		}
	}
	return out
}

// newHookSecret is 32 random bytes, hex.
func newHookSecret() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "hksec_" + hex.EncodeToString(b[:])
}

// ListTriggers lists the project's triggers.
func (s *server) ListTriggers(ctx context.Context, req gen.ListTriggersRequestObject) (gen.ListTriggersResponseObject, error) {
	if err := s.triggersOn(); err != nil {
		return nil, err
	}
	ts, err := s.triggers.ListTriggers(ctx, req.Project)
	if err != nil {
		return nil, internalError(err)
	}
	out := gen.TriggerList{Items: make([]gen.Trigger, len(ts))}
	for i, t := range ts {
		out.Items[i] = s.triggerView(t)
	}
	return gen.ListTriggers200JSONResponse(out), nil
}

// GetTrigger reads one trigger.
func (s *server) GetTrigger(ctx context.Context, req gen.GetTriggerRequestObject) (gen.GetTriggerResponseObject, error) {
	if err := s.triggersOn(); err != nil {
		return nil, err
	}
	t, err := s.triggers.GetTrigger(ctx, req.Project, req.Trigger)
	if err != nil {
		return nil, triggerErr(req.Project, req.Trigger, err)
	}
	return gen.GetTrigger200JSONResponse(s.triggerView(t)), nil
}

// UpdateTrigger enables or disables a trigger.
func (s *server) UpdateTrigger(ctx context.Context, req gen.UpdateTriggerRequestObject) (gen.UpdateTriggerResponseObject, error) {
	if err := s.triggersOn(); err != nil {
		return nil, err
	}
	t, err := s.triggers.SetTriggerEnabled(ctx, req.Project, req.Trigger, deref(req.Body).Enabled)
	if err != nil {
		return nil, triggerErr(req.Project, req.Trigger, err)
	}
	return gen.UpdateTrigger200JSONResponse(s.triggerView(t)), nil
}

// DeleteTrigger deletes a trigger and its firing log.
func (s *server) DeleteTrigger(ctx context.Context, req gen.DeleteTriggerRequestObject) (gen.DeleteTriggerResponseObject, error) {
	if err := s.triggersOn(); err != nil {
		return nil, err
	}
	if err := s.triggers.DeleteTrigger(ctx, req.Project, req.Trigger); err != nil {
		return nil, triggerErr(req.Project, req.Trigger, err)
	}
	return gen.DeleteTrigger204Response{}, nil
}

// ListTriggerFirings serves a page of the firing log.
func (s *server) ListTriggerFirings(ctx context.Context, req gen.ListTriggerFiringsRequestObject) (gen.ListTriggerFiringsResponseObject, error) {
	if err := s.triggersOn(); err != nil {
		return nil, err
	}
	t, err := s.triggers.GetTrigger(ctx, req.Project, req.Trigger)
	if err != nil {
		return nil, triggerErr(req.Project, req.Trigger, err)
	}
	page, err := s.triggers.ListTriggerFirings(ctx, t.ID, derefOr(req.Params.PageSize, defaultTriggerFireList), deref(req.Params.PageToken))
	if errors.Is(err, catalog.ErrInvalidArgument) {
		fe := []gen.FieldError{{Path: "query.pageToken", Message: "not a page token of this trigger's firings"}}
		return nil, newProblem(ptInvalid, "%s", summarize(fe)).withErrors(fe)
	}
	if err != nil {
		return nil, internalError(err)
	}
	out := gen.TriggerFiringList{Items: make([]gen.TriggerFiring, len(page.Firings))}
	for i, f := range page.Firings {
		out.Items[i] = firingView(f)
	}
	if page.NextPageToken != "" {
		out.NextPageToken = &page.NextPageToken
	}
	return gen.ListTriggerFirings200JSONResponse(out), nil
}

// errHookAuth is every reason a hook request is not accepted as the
// trigger's: the same answer, so the route tells a caller without the
// secret nothing (not whether the project or trigger exists).
func errHookAuth() error {
	return newProblem(ptUnauthenticated, "the request is not signed with the secret of an enabled hook trigger")
}

// FireHook accepts a signed request for a hook trigger and queues its
// firing; the dispatcher starts the run.
func (s *server) FireHook(ctx context.Context, req gen.FireHookRequestObject) (gen.FireHookResponseObject, error) {
	if err := s.triggersOn(); err != nil {
		return nil, err
	}
	raw, err := rawBody(ctx)
	if err != nil {
		return nil, newProblem(ptMalformed, "could not read the request body")
	}
	if len(raw) > maxHookBody {
		return nil, newProblem(ptTooLarge, "a hook's body is at most %d bytes, got %d", maxHookBody, len(raw))
	}
	t, err := s.triggers.GetTrigger(ctx, req.Project, req.Trigger)
	if errors.Is(err, catalog.ErrNotFound) || (err == nil && (t.Kind != catalog.TriggerHook || !t.Enabled)) {
		return nil, errHookAuth()
	}
	if err != nil {
		return nil, internalError(err)
	}
	secret, err := s.triggers.TriggerSecret(ctx, t)
	if err != nil {
		return nil, internalError(err)
	}
	if !s.validHookRequest(secret, raw, req.Params) {
		return nil, errHookAuth()
	}
	delivery := deref(req.Params.XAtelierDelivery)
	if delivery == "" {
		delivery = deref(req.Params.XGitHubDelivery)
	}
	if delivery == "" {
		delivery = "dlv-" + s.newID()
	}
	if len(delivery) > maxHookDeliveryID {
		fe := []gen.FieldError{{Path: "header.X-Atelier-Delivery", Message: fmt.Sprintf("at most %d characters", maxHookDeliveryID)}}
		return nil, newProblem(ptInvalid, "%s", summarize(fe)).withErrors(fe)
	}
	sum := sha256.Sum256([]byte(t.ID + "\x00" + delivery))
	f := catalog.TriggerFiring{
		ID: "fir-" + hex.EncodeToString(sum[:12]), TriggerID: t.ID, Project: t.Project, Source: delivery, Payload: raw,
	}
	queued, err := s.triggers.QueueHookFiring(ctx, f)
	if err != nil {
		return nil, internalError(err)
	}
	return gen.FireHook202JSONResponse{Firing: f.ID, Delivery: delivery, Duplicate: !queued}, nil
}

// hookMaxSkew bounds how old (or early) a signed timestamp may be: a
// request captured on the way cannot be replayed later under another
// delivery ID (which the signature does not cover).
const hookMaxSkew = 5 * time.Minute

// validHookRequest checks the request's signature in constant time:
// X-Atelier-Signature over "<X-Atelier-Timestamp>.<body>" with a fresh
// timestamp (as Atelier's webhooks sign), or GitHub's X-Hub-Signature-256
// over the body alone.
func (s *server) validHookRequest(secret string, body []byte, p gen.FireHookParams) bool {
	if secret == "" {
		return false
	}
	if sig := deref(p.XAtelierSignature); sig != "" {
		// The scheme Atelier's own deliveries are signed with: checked by
		// the same code a receiver of them uses.
		return webhooks.Verify(secret, deref(p.XAtelierTimestamp), strings.ToLower(strings.TrimSpace(sig)), body, s.now(), hookMaxSkew) == nil
	}
	return hmacMatches(secret, body, deref(p.XHubSignature256))
}

// hmacMatches checks sig, "sha256=<hex HMAC-SHA256 of msg>" (GitHub's
// form, over the body alone).
func hmacMatches(secret string, msg []byte, sig string) bool {
	got, ok := strings.CutPrefix(strings.TrimSpace(sig), hookSignaturePrefix)
	if !ok {
		return false
	}
	want := hmac.New(sha256.New, []byte(secret))
	want.Write(msg)
	g, err := hex.DecodeString(got)
	return err == nil && hmac.Equal(g, want.Sum(nil))
}

// rawBody is the request's body as sent (limitBody buffered it): the
// bytes a signature covers, not their decoding.
func rawBody(ctx context.Context) ([]byte, error) {
	r := requestFrom(ctx)
	if r == nil || r.GetBody == nil {
		return nil, errors.New("no buffered body")
	}
	rc, err := r.GetBody()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func triggerErr(project, name string, err error) error {
	if errors.Is(err, catalog.ErrNotFound) {
		return notFound("trigger %q not found in project %q", name, project)
	}
	return internalError(err)
}

func triggerPath(t catalog.Trigger) string {
	return fmt.Sprintf("/v1/projects/%s/triggers/%s", t.Project, t.Name)
}

func (s *server) triggerView(t catalog.Trigger) gen.Trigger {
	out := gen.Trigger{
		Id: t.ID, Project: t.Project, Name: t.Name, Pipeline: t.Pipeline, Params: t.Params,
		MaxPerMinute: t.MaxPerMinute, Enabled: t.Enabled, CreatedAt: t.CreatedAt.UTC(),
	}
	if t.Version > 0 {
		out.Version = &t.Version
	}
	if t.Description != "" {
		out.Description = &t.Description
	}
	if t.CreatedBy != "" {
		out.CreatedBy = &t.CreatedBy
	}
	switch t.Kind {
	case catalog.TriggerRun:
		states := make([]gen.RunState, len(t.OnStates))
		for i, st := range t.OnStates {
			states[i] = gen.RunState(st)
		}
		out.On.RunFinished = &gen.TriggerRunFinished{Pipeline: t.OnPipeline, States: &states}
	case catalog.TriggerHook:
		out.On.Hook = &map[string]any{}
		u := s.publicURL + fmt.Sprintf("/v1/hooks/%s/%s", t.Project, t.Name)
		out.HookUrl = &u
	}
	return out
}

func firingView(f catalog.TriggerFiring) gen.TriggerFiring {
	out := gen.TriggerFiring{
		Id: f.ID, Source: f.Source, State: gen.TriggerFiringState(f.State), Attempts: f.Attempts,
		CreatedAt: f.CreatedAt.UTC(), NextAttemptAt: f.NextAttemptAt,
	}
	if f.RunID != "" {
		out.RunId = &f.RunID
	}
	if f.Params != nil {
		out.Params = &f.Params
	}
	if f.Error != "" {
		out.Error = &f.Error
	}
	if f.FinishedAt != nil {
		t := f.FinishedAt.UTC()
		out.FinishedAt = &t
	}
	return out
}
