package store

import (
	"testing"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/store/db"
	"github.com/atelier-ml/atelier/internal/store/storetest"
)

// SealStoredSecrets replaces a stored secret only if it is still the
// value it read: one replaced meanwhile (by a create racing the start-up
// pass) is left as written.
func TestReplaceSecretIsACompareAndSwap(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateProject(ctx, catalog.Project{Name: "p"}); err != nil {
		t.Fatal(err)
	}
	w, err := s.CreateWebhook(ctx, catalog.Webhook{Project: "p", URL: "https://example.com/p", Events: []string{catalog.EventStepFailed},
		Secret: "written-0123456789", Enabled: true}, 50)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.CreateTrigger(ctx, catalog.Trigger{Project: "p", Name: "hook", Kind: catalog.TriggerHook, Pipeline: "eval",
		Secret: "written-0123456789", MaxPerMinute: 60, Enabled: true}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.q.ReplaceWebhookSecret(ctx, db.ReplaceWebhookSecretParams{ID: w.ID, Old: "read-before", Sealed: "sealed:v1:x"}); err != nil || n != 0 {
		t.Fatalf("webhook: replaced %d, %v", n, err)
	}
	if n, err := s.q.ReplaceTriggerSecret(ctx, db.ReplaceTriggerSecretParams{ID: tr.ID, Old: "read-before", Sealed: "sealed:v1:x"}); err != nil || n != 0 {
		t.Fatalf("trigger: replaced %d, %v", n, err)
	}
	if got, err := s.TriggerSecret(ctx, tr); err != nil || got != "written-0123456789" {
		t.Fatalf("trigger secret %q, %v", got, err)
	}
	if n, err := s.q.ReplaceTriggerSecret(ctx, db.ReplaceTriggerSecretParams{ID: tr.ID, Old: "written-0123456789", Sealed: "other"}); err != nil || n != 1 {
		t.Fatalf("trigger, unchanged: replaced %d, %v", n, err)
	}
}
