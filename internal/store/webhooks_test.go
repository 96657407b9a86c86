package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/runstate"
)

func mustWebhook(t *testing.T, s *store.Store, project, pipeline string, events ...string) catalog.Webhook {
	t.Helper()
	w, err := s.CreateWebhook(t.Context(), catalog.Webhook{
		Project: project, URL: "https://example.com/" + project, Events: events, Pipeline: pipeline,
		Secret: "0123456789abcdef", Enabled: true,
	}, 50)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func runStatus(id string, seq int64, state runstate.State, steps ...runstate.StepStatus) runstate.Status {
	now := time.Now()
	st := runstate.Status{RunID: id, Project: "p", Pipeline: "train", Workflow: runstate.PipelineWorkflowName,
		State: state, Seq: seq, StartedAt: &now, Steps: steps}
	if state.Terminal() {
		st.FinishedAt = &now
	}
	return st
}

// claimAll claims every due delivery (as a dispatcher would) and returns
// them by event type.
func claimAll(t *testing.T, s *store.Store, owner string) map[string][]catalog.ClaimedDelivery {
	t.Helper()
	now := time.Now()
	cs, err := s.ClaimWebhookDeliveries(t.Context(), owner, now, now.Add(time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]catalog.ClaimedDelivery{}
	for _, c := range cs {
		out[c.Event] = append(out[c.Event], c)
	}
	return out
}

// The mirror queues each event once per subscribed webhook, when the
// status that shows it is stored: a later status showing it again, or a
// stale one, queues nothing more; webhooks of other projects, pipelines
// or events, and disabled ones, get nothing.
func TestMirrorRunQueuesWebhookEvents(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p")
	mustProject(t, s, "q")
	all := mustWebhook(t, s, "p", "", catalog.EventRunFinished, catalog.EventStepFailed, catalog.EventApprovalRequested)
	mustWebhook(t, s, "p", "other-pipeline", catalog.EventRunFinished)
	mustWebhook(t, s, "q", "", catalog.EventRunFinished)
	off := mustWebhook(t, s, "p", "", catalog.EventRunFinished)
	enabled := false
	if _, err := s.UpdateWebhook(ctx, "p", off.ID, catalog.WebhookUpdate{Enabled: &enabled}); err != nil {
		t.Fatal(err)
	}

	// No event: nothing queued.
	if err := s.MirrorRun(ctx, runStatus("r1", 1, runstate.Running)); err != nil {
		t.Fatal(err)
	}
	if got := claimAll(t, s, "gw"); len(got) != 0 {
		t.Fatalf("queued %v for a status without events", got)
	}

	now := time.Now()
	failed := runstate.StepStatus{Name: "train", Kind: "container", State: runstate.StepFailed, Error: "exit 3", FinishedAt: &now}
	gate := runstate.StepStatus{Name: "gate", Kind: "approval", State: runstate.StepWaitingForApproval, StartedAt: &now,
		Approval: &runstate.ApprovalStatus{Message: "ok?", Roles: []string{"editor", "admin"}}}
	if err := s.MirrorRun(ctx, runStatus("r1", 2, runstate.Running, gate, failed)); err != nil {
		t.Fatal(err)
	}
	// The same events again (a newer status), and a stale write.
	if err := s.MirrorRun(ctx, runStatus("r1", 3, runstate.Running, gate, failed)); err != nil {
		t.Fatal(err)
	}
	if err := s.MirrorRun(ctx, runStatus("r1", 1, runstate.Failed, gate, failed)); err != nil {
		t.Fatal(err)
	}
	got := claimAll(t, s, "gw")
	if len(got[catalog.EventStepFailed]) != 1 || len(got[catalog.EventApprovalRequested]) != 1 || len(got[catalog.EventRunFinished]) != 0 {
		t.Fatalf("queued %v, want one step.failed and one approval.requested", got)
	}
	c := got[catalog.EventStepFailed][0]
	if c.URL != all.URL || c.Secret != "0123456789abcdef" || c.Attempt != 1 {
		t.Errorf("claimed %+v", c)
	}

	if err := s.MirrorRun(ctx, runStatus("r1", 4, runstate.Failed, gate, failed)); err != nil {
		t.Fatal(err)
	}
	got = claimAll(t, s, "gw")
	if len(got) != 1 || len(got[catalog.EventRunFinished]) != 1 {
		t.Fatalf("queued %v, want run.finished only (to the matching, enabled webhook of p)", got)
	}

	// Another project's run reaches q's webhook only.
	other := runStatus("r2", 1, runstate.Succeeded)
	other.Project = "q"
	if err := s.MirrorRun(ctx, other); err != nil {
		t.Fatal(err)
	}
	got = claimAll(t, s, "gw")
	if len(got[catalog.EventRunFinished]) != 1 || got[catalog.EventRunFinished][0].URL != "https://example.com/q" {
		t.Fatalf("queued %v, want q's run.finished", got)
	}
}

// Leases: a claimed delivery is not claimed again until its lease expires
// or its attempt is recorded; an attempt recorded by a gateway that lost
// the lease is dropped; the log shows each recorded attempt.
func TestWebhookDeliveryLeases(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p")
	w := mustWebhook(t, s, "p", "", catalog.EventRunFinished)
	if err := s.MirrorRun(ctx, runStatus("r1", 1, runstate.Succeeded)); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	a, err := s.ClaimWebhookDeliveries(ctx, "gw-a", now, now.Add(time.Second), 10)
	if err != nil || len(a) != 1 {
		t.Fatalf("claim: %v, %v", a, err)
	}
	if b, _ := s.ClaimWebhookDeliveries(ctx, "gw-b", now, now.Add(time.Second), 10); len(b) != 0 {
		t.Fatalf("gw-b claimed a leased delivery: %v", b)
	}
	// gw-a dies; its lease expires and gw-b takes over (attempt 2).
	later := now.Add(2 * time.Second)
	b, err := s.ClaimWebhookDeliveries(ctx, "gw-b", later, later.Add(time.Minute), 10)
	if err != nil || len(b) != 1 || b[0].Attempt != 2 {
		t.Fatalf("claim after expiry: %+v, %v", b, err)
	}
	code := 500
	// gw-a's late report is dropped.
	if err := s.RecordWebhookAttempt(ctx, catalog.AttemptResult{DeliveryID: a[0].ID, Owner: "gw-a", Attempt: 1,
		State: catalog.DeliverySucceeded, StartedAt: now, NextAttemptAt: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordWebhookAttempt(ctx, catalog.AttemptResult{DeliveryID: b[0].ID, Owner: "gw-b", Attempt: 2,
		State: catalog.DeliveryPending, StartedAt: later, Duration: 15 * time.Millisecond, StatusCode: &code,
		Error: "HTTP 500", NextAttemptAt: later.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.ClaimWebhookDeliveries(ctx, "gw-c", later, later.Add(time.Minute), 10); len(c) != 0 {
		t.Fatalf("claimed before its next attempt: %v", c)
	}
	page, err := s.ListWebhookDeliveries(ctx, "p", w.ID, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Deliveries) != 1 {
		t.Fatalf("log %+v", page)
	}
	d := page.Deliveries[0]
	if d.State != catalog.DeliveryPending || d.Attempts != 2 || len(d.Log) != 1 || d.Log[0].Attempt != 2 ||
		*d.Log[0].StatusCode != 500 || d.Log[0].Duration != 15*time.Millisecond || d.NextAttemptAt == nil {
		t.Errorf("delivery %+v, log %+v", d, d.Log)
	}
	// Another project cannot read the log.
	mustProject(t, s, "q")
	if _, err := s.ListWebhookDeliveries(ctx, "q", w.ID, 10, ""); !isNotFound(err) {
		t.Errorf("another project read the log: %v", err)
	}
}

func isNotFound(err error) bool {
	return err != nil && errors.Is(err, catalog.ErrNotFound)
}

func TestWebhookLimitAndPages(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p")
	w := mustWebhook(t, s, "p", "", catalog.EventRunFinished)
	if _, err := s.CreateWebhook(ctx, catalog.Webhook{Project: "p", URL: "https://x", Events: []string{"run.finished"}, Secret: "0123456789abcdef"}, 1); !errors.Is(err, catalog.ErrConflict) {
		t.Fatalf("past the limit: %v", err)
	}
	for i := range 5 {
		if err := s.MirrorRun(ctx, runStatus("r"+string(rune('a'+i)), 1, runstate.Succeeded)); err != nil {
			t.Fatal(err)
		}
	}
	seen, tok := 0, ""
	for {
		page, err := s.ListWebhookDeliveries(ctx, "p", w.ID, 2, tok)
		if err != nil {
			t.Fatal(err)
		}
		seen += len(page.Deliveries)
		if tok = page.NextPageToken; tok == "" {
			break
		}
	}
	if seen != 5 {
		t.Errorf("walked %d deliveries, want 5", seen)
	}
	if _, err := s.ListWebhookDeliveries(ctx, "p", w.ID, 2, "garbage"); !errors.Is(err, catalog.ErrInvalidArgument) {
		t.Errorf("bad token: %v", err)
	}
}

// A webhook that opts in gets the step output a failed step's error
// quotes; the others get the error without it.
func TestWebhookStepOutputOptIn(t *testing.T) {
	s := newStore(t)
	ctx := t.Context()
	mustProject(t, s, "p")
	plain := mustWebhook(t, s, "p", "", catalog.EventStepFailed)
	full, err := s.CreateWebhook(ctx, catalog.Webhook{Project: "p", URL: "https://example.com/full", Events: []string{catalog.EventStepFailed},
		Secret: "0123456789abcdef", Enabled: true, IncludeOutput: true}, 50)
	if err != nil || !full.IncludeOutput {
		t.Fatalf("%+v %v", full, err)
	}
	now := time.Now()
	failed := runstate.StepStatus{Name: "train", State: runstate.StepFailed, FinishedAt: &now,
		Error: "command exited with code 3" + runstate.OutputTail + "loss=nan"}
	if err := s.MirrorRun(ctx, runStatus("r1", 1, runstate.Running, failed)); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, d := range claimAll(t, s, "gw")[catalog.EventStepFailed] {
		got[d.URL] = string(d.Payload)
	}
	if len(got) != 2 || strings.Contains(got[plain.URL], "loss=nan") || !strings.Contains(got[full.URL], "loss=nan") {
		t.Fatalf("payloads %v", got)
	}
}
