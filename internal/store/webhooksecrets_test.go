package store_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/store/storetest"
	"github.com/atelier-ml/atelier/runstate"
)

// storedSecret reads the secret column of table's row id as stored.
func storedSecret(t *testing.T, url, table, id string) string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	var v string
	if err := conn.QueryRow(t.Context(), "SELECT secret FROM "+table+" WHERE id = $1", id).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

func openStore(t *testing.T, url string, opts ...store.Option) *store.Store {
	t.Helper()
	s, err := store.Open(t.Context(), url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if err := s.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	return s
}

func newKey(t *testing.T, old ...string) (*secretbox.Box, string) {
	t.Helper()
	u, err := secretbox.NewLocalKeyURL()
	if err != nil {
		t.Fatal(err)
	}
	b, err := secretbox.Open(t.Context(), u, old...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, u
}

// Webhook signing secrets with a secret box: stored sealed (a dump of the
// table does not hold them), opened for the dispatcher's claims; one
// stored in clear before the key existed is sealed by SealStoredSecrets,
// and a key rotation rewraps them.
func TestWebhookSecretsAreSealed(t *testing.T) {
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	clear := openStore(t, url)
	mustProject(t, clear, "p")
	legacy := mustWebhook(t, clear, "p", "", catalog.EventStepFailed)
	if storedSecret(t, url, "webhooks", legacy.ID) != "0123456789abcdef" {
		t.Fatal("without a box the secret is stored as given")
	}

	box, oldURL := newKey(t)
	s := openStore(t, url, store.WithSecretBox(box))
	w, err := s.CreateWebhook(ctx, catalog.Webhook{Project: "p", URL: "https://example.com/sealed", Events: []string{catalog.EventStepFailed},
		Secret: "fedcba9876543210-sealed", Enabled: true}, 50)
	if err != nil {
		t.Fatal(err)
	}
	if w.Secret != "fedcba9876543210-sealed" {
		t.Fatalf("create returns the secret it was given, got %q", w.Secret)
	}
	stored := storedSecret(t, url, "webhooks", w.ID)
	if !strings.HasPrefix(stored, "sealed:v1:") || strings.Contains(stored, "fedcba9876543210") {
		t.Fatalf("stored %q", stored)
	}
	if got, _ := s.GetWebhook(ctx, "p", w.ID); got.Secret != "" {
		t.Fatalf("a read that never serves it opened it: %q", got.Secret)
	}
	n, err := s.SealStoredSecrets(ctx)
	if err != nil || !reflect.DeepEqual(n, store.SealedCounts{Webhooks: 1}) {
		t.Fatalf("SealStoredSecrets = %+v, %v (the legacy one)", n, err)
	}
	if strings.Contains(storedSecret(t, url, "webhooks", legacy.ID), "0123456789abcdef") {
		t.Fatal("the legacy secret is still in clear")
	}

	// The dispatcher's claims open both.
	now := runstate.StepStatus{Name: "train", Kind: "container", State: runstate.StepFailed, Error: "exit 3"}
	if err := s.MirrorRun(ctx, runStatus("r1", 1, runstate.Running, now)); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]bool{}
	for _, c := range claimAll(t, s, "gw")[catalog.EventStepFailed] {
		secrets[c.Secret] = true
	}
	if !secrets["0123456789abcdef"] || !secrets["fedcba9876543210-sealed"] {
		t.Fatalf("claimed secrets %v", secrets)
	}

	// Rotation: a new key with the old one rewraps both; then the new key
	// alone opens them.
	both, newURL := newKey(t, oldURL)
	rot := openStore(t, url, store.WithSecretBox(both))
	if n, err := rot.SealStoredSecrets(ctx); err != nil || !reflect.DeepEqual(n, store.SealedCounts{Webhooks: 2}) {
		t.Fatalf("rotation rewrapped %+v, %v", n, err)
	}
	alone, err := secretbox.Open(ctx, newURL)
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	fresh := openStore(t, url, store.WithSecretBox(alone))
	if err := fresh.MirrorRun(ctx, runStatus("r2", 1, runstate.Running, now)); err != nil {
		t.Fatal(err)
	}
	if got := claimAll(t, fresh, "gw2")[catalog.EventStepFailed]; len(got) != 2 {
		t.Fatalf("after rotation the new key alone claims %d deliveries", len(got))
	}
}

// A stored secret that cannot be sealed or rewrapped (malformed, or sealed
// with a key this installation lacks) is skipped and reported, not fatal:
// the others are still sealed, and every process still starts.
func TestSealingSkipsWhatItCannotOpen(t *testing.T) {
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	clear := openStore(t, url)
	mustProject(t, clear, "p")
	create := func(s *store.Store, secret string) catalog.Webhook {
		t.Helper()
		w, err := s.CreateWebhook(ctx, catalog.Webhook{Project: "p", URL: "https://example.com/h", Events: []string{catalog.EventStepFailed},
			Secret: secret, Enabled: true}, 50)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	malformed := create(clear, "sealed:v1:not-a-sealed-value")
	legacy := create(clear, "0123456789abcdef")
	other, _ := newKey(t)
	foreign := create(openStore(t, url, store.WithSecretBox(other)), "sealed-by-a-key-now-lost")

	box, _ := newKey(t)
	s := openStore(t, url, store.WithSecretBox(box))
	n, err := s.SealStoredSecrets(ctx)
	if err != nil {
		t.Fatalf("SealStoredSecrets: %v", err)
	}
	if n.Webhooks != 1 || len(n.Skipped) != 2 {
		t.Fatalf("sealed %d, skipped %q; want the legacy one sealed and two skipped", n.Webhooks, n.Skipped)
	}
	joined := strings.Join(n.Skipped, "\n")
	for _, id := range []string{malformed.ID, foreign.ID} {
		if !strings.Contains(joined, "webhook "+id+": ") {
			t.Errorf("skipped %q does not name webhook %s", n.Skipped, id)
		}
	}
	if strings.Contains(joined, "sealed-by-a-key-now-lost") {
		t.Errorf("a skip message quotes a secret: %q", n.Skipped)
	}
	if got := storedSecret(t, url, "webhooks", legacy.ID); !strings.HasPrefix(got, "sealed:v1:") {
		t.Errorf("the legacy secret was not sealed: %q", got)
	}
	if got := storedSecret(t, url, "webhooks", malformed.ID); got != "sealed:v1:not-a-sealed-value" {
		t.Errorf("a skipped secret was changed: %q", got)
	}
}

// Hook trigger secrets are sealed like webhooks': one stored in clear
// before the key existed is sealed by SealStoredSecrets (and still opens
// to the value deliveries are signed with), a run trigger (no secret) is
// left alone, and a key rotation rewraps them.
func TestTriggerSecretsAreSealed(t *testing.T) {
	ctx := t.Context()
	url := storetest.NewDatabase(t)
	hook := func(s *store.Store, name, secret string) catalog.Trigger {
		t.Helper()
		tr, err := s.CreateTrigger(ctx, catalog.Trigger{Project: "p", Name: name, Kind: catalog.TriggerHook, Pipeline: "eval",
			Secret: secret, MaxPerMinute: 60, Enabled: true}, 10)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	opens := func(s *store.Store, tr catalog.Trigger, want string) {
		t.Helper()
		if got, err := s.TriggerSecret(ctx, tr); err != nil || got != want {
			t.Fatalf("trigger %s opens to %q, %v; want %q", tr.Name, got, err, want)
		}
	}

	clear := openStore(t, url)
	mustProject(t, clear, "p")
	legacy := hook(clear, "legacy", "hksec_legacy-0123456789")
	if storedSecret(t, url, "triggers", legacy.ID) != "hksec_legacy-0123456789" {
		t.Fatal("without a box the secret is stored as given")
	}
	onRun, err := clear.CreateTrigger(ctx, catalog.Trigger{Project: "p", Name: "on-run", Kind: catalog.TriggerRun, OnPipeline: "train",
		OnStates: []runstate.State{runstate.Succeeded}, Pipeline: "eval", MaxPerMinute: 60, Enabled: true}, 10)
	if err != nil {
		t.Fatal(err)
	}

	box, oldURL := newKey(t)
	s := openStore(t, url, store.WithSecretBox(box))
	fresh := hook(s, "fresh", "hksec_fresh-9876543210")
	if v := storedSecret(t, url, "triggers", fresh.ID); !strings.HasPrefix(v, "sealed:v1:") || strings.Contains(v, "9876543210") {
		t.Fatalf("stored %q", v)
	}
	opens(s, legacy, "hksec_legacy-0123456789") // in clear: opens as stored
	n, err := s.SealStoredSecrets(ctx)
	if err != nil || !reflect.DeepEqual(n, store.SealedCounts{Triggers: 1}) {
		t.Fatalf("SealStoredSecrets = %+v, %v (the legacy one)", n, err)
	}
	if v := storedSecret(t, url, "triggers", legacy.ID); !strings.HasPrefix(v, "sealed:v1:") || strings.Contains(v, "0123456789") {
		t.Fatalf("the legacy secret is stored as %q", v)
	}
	if v := storedSecret(t, url, "triggers", onRun.ID); v != "" {
		t.Fatalf("a run trigger's secret became %q", v)
	}
	opens(s, legacy, "hksec_legacy-0123456789")
	opens(s, fresh, "hksec_fresh-9876543210")
	if n, err := s.SealStoredSecrets(ctx); err != nil || !reflect.DeepEqual(n, store.SealedCounts{}) {
		t.Fatalf("sealing again changed %+v, %v", n, err)
	}
	if _, err := clear.TriggerSecret(ctx, legacy); err == nil {
		t.Fatal("a process without the key opened a sealed secret")
	}

	// Rotation: a new key with the old one rewraps both; then the new key
	// alone opens them.
	both, newURL := newKey(t, oldURL)
	rot := openStore(t, url, store.WithSecretBox(both))
	if n, err := rot.SealStoredSecrets(ctx); err != nil || !reflect.DeepEqual(n, store.SealedCounts{Triggers: 2}) {
		t.Fatalf("rotation rewrapped %+v, %v", n, err)
	}
	alone, err := secretbox.Open(ctx, newURL)
	if err != nil {
		t.Fatal(err)
	}
	defer alone.Close()
	after := openStore(t, url, store.WithSecretBox(alone))
	opens(after, legacy, "hksec_legacy-0123456789")
	opens(after, fresh, "hksec_fresh-9876543210")
}
