package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

// fakeTriggers is an in-memory Triggers, scoped by project like the store.
type fakeTriggers struct {
	mu      sync.Mutex
	byKey   map[string]catalog.Trigger // project/name
	firings []catalog.TriggerFiring
}

func newFakeTriggers() *fakeTriggers { return &fakeTriggers{byKey: map[string]catalog.Trigger{}} }

func (f *fakeTriggers) CreateTrigger(_ context.Context, t catalog.Trigger, _ int) (catalog.Trigger, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byKey[t.Project+"/"+t.Name]; ok {
		return catalog.Trigger{}, catalog.ErrConflict
	}
	f.byKey[t.Project+"/"+t.Name] = t
	return t, nil
}

func (f *fakeTriggers) GetTrigger(_ context.Context, project, name string) (catalog.Trigger, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.byKey[project+"/"+name]
	if !ok {
		return catalog.Trigger{}, catalog.ErrNotFound
	}
	t.Secret = "" // sealed in the store: never read back
	return t, nil
}

func (f *fakeTriggers) ListTriggers(_ context.Context, project string) ([]catalog.Trigger, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []catalog.Trigger
	for _, t := range f.byKey {
		if t.Project == project {
			t.Secret = ""
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b catalog.Trigger) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (f *fakeTriggers) SetTriggerEnabled(ctx context.Context, project, name string, enabled bool) (catalog.Trigger, error) {
	f.mu.Lock()
	t, ok := f.byKey[project+"/"+name]
	if ok {
		t.Enabled = enabled
		f.byKey[project+"/"+name] = t
	}
	f.mu.Unlock()
	if !ok {
		return catalog.Trigger{}, catalog.ErrNotFound
	}
	return f.GetTrigger(ctx, project, name)
}

func (f *fakeTriggers) DeleteTrigger(_ context.Context, project, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.byKey[project+"/"+name]; !ok {
		return catalog.ErrNotFound
	}
	delete(f.byKey, project+"/"+name)
	return nil
}

func (f *fakeTriggers) ListTriggerFirings(_ context.Context, id string, _ int, _ string) (catalog.TriggerFiringPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var p catalog.TriggerFiringPage
	for _, fi := range f.firings {
		if fi.TriggerID == id {
			p.Firings = append(p.Firings, fi)
		}
	}
	return p, nil
}

func (f *fakeTriggers) TriggerSecret(_ context.Context, t catalog.Trigger) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byKey[t.Project+"/"+t.Name].Secret, nil
}

func (f *fakeTriggers) QueueHookFiring(_ context.Context, fi catalog.TriggerFiring) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.firings {
		if x.TriggerID == fi.TriggerID && x.Source == fi.Source {
			return false, nil
		}
	}
	fi.State = catalog.FiringPending
	f.firings = append(f.firings, fi)
	return true, nil
}

const triggersPath = "/v1/projects/alpha/triggers"

// A trigger is checked as a run start would be, every problem at once.
func TestCreateTriggerProblems(t *testing.T) {
	h := newHarness(t, WithTriggers(newFakeTriggers()))
	withPipeline(t, h)
	p := wantProblem(t, h.do("POST", triggersPath, h.editor, map[string]any{
		"name": "Bad_Name", "pipeline": "train",
		"on":     map[string]any{"runFinished": map[string]any{"pipeline": "train", "states": []string{"SUCCEEDED", "RUNNING"}}},
		"params": map[string]any{"epochs": "{{ body.n }}", "lr": "fast", "nope": 1},
	}), http.StatusUnprocessableEntity, "invalid-trigger")
	got := map[string]string{}
	for _, e := range deref(p.Errors) {
		got[e.Path] = e.Message
	}
	for path, want := range map[string]string{
		"name":                     "DNS label",
		"on.runFinished.pipeline":  "cannot start the pipeline whose runs fire it",
		"on.runFinished.states[1]": `"RUNNING" is not a final state`,
		"params.epochs":            `unknown name "body"; this trigger's templates read upstream`,
		"params.lr":                "number",
		"params.nope":              `has no param "nope"`,
	} {
		if !strings.Contains(got[path], want) {
			t.Errorf("%s: got %q, want it to contain %q (all: %v)", path, got[path], want, got)
		}
	}
	p = wantProblem(t, h.do("POST", triggersPath, h.editor, map[string]any{
		"name": "x", "pipeline": "missing", "on": map[string]any{"hook": map[string]any{}, "runFinished": map[string]any{"pipeline": "a"}},
	}), http.StatusUnprocessableEntity, "invalid-trigger")
	if paths := errorPaths(p); !slices.Equal(paths, []string{"on", "pipeline"}) {
		t.Fatalf("paths %v", paths)
	}
}

func sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// A hook trigger: its secret is shown once; its inbound URL takes only
// requests signed with it (every refusal the same 401, whether or not
// the trigger exists), queues one firing per delivery ID, and needs no
// token. A viewer reads triggers; another project sees none.
func TestHookTrigger(t *testing.T) {
	ft := newFakeTriggers()
	h := newHarness(t, WithTriggers(ft))
	withPipeline(t, h)
	r := h.do("POST", triggersPath, h.editor, map[string]any{
		"name": "on-push", "pipeline": "train", "on": map[string]any{"hook": map[string]any{}},
		"params": map[string]any{"epochs": "{{ body.epochs }}", "lr": 0.5},
	})
	wantStatus(t, r, http.StatusCreated)
	var created gen.CreatedTrigger
	r.json(t, &created)
	secret := deref(created.Secret)
	if !strings.HasPrefix(secret, "hksec_") || deref(created.Trigger.HookUrl) != "/v1/hooks/alpha/on-push" || r.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("%+v %q", created, r.Header.Get("Cache-Control"))
	}
	get := h.do("GET", triggersPath+"/on-push", h.viewer, nil)
	wantStatus(t, get, http.StatusOK)
	if strings.Contains(string(get.body), secret) {
		t.Fatal("GET returned the secret")
	}
	wantProblem(t, h.do("GET", "/v1/projects/beta/triggers/on-push", h.betaEditor, nil), http.StatusNotFound, "not-found")
	wantProblem(t, h.do("GET", triggersPath+"/on-push", h.betaEditor, nil), http.StatusNotFound, "not-found")

	body := []byte(`{"epochs": 4}`)
	hook := "/v1/hooks/alpha/on-push"
	var refusals []string
	// The harness clock starts at t0 and ticks a second per reading.
	ts := strconv.FormatInt(t0.Unix(), 10)
	stamped := append([]byte(ts+"."), body...)
	stale := strconv.FormatInt(t0.Add(-time.Hour).Unix(), 10)
	for _, c := range []struct {
		path string
		hdr  []string
	}{
		{hook, nil},
		{hook, []string{"X-Hub-Signature-256", sign("wrong", body)}},
		{hook, []string{"X-Hub-Signature-256", "sha256=zz"}},
		{hook, []string{"X-Atelier-Signature", sign(secret, body), "X-Atelier-Timestamp", ts}},
		{hook, []string{"X-Atelier-Signature", sign(secret, stamped)}},
		{hook, []string{"X-Atelier-Signature", sign(secret, append([]byte(stale+"."), body...)), "X-Atelier-Timestamp", stale}},
		{"/v1/hooks/alpha/nope", []string{"X-Hub-Signature-256", sign(secret, body)}},
		{"/v1/hooks/beta/on-push", []string{"X-Hub-Signature-256", sign(secret, body)}},
	} {
		p := wantProblem(t, h.do("POST", c.path, "", body, c.hdr...), http.StatusUnauthorized, "unauthenticated")
		refusals = append(refusals, deref(p.Detail))
	}
	if c := slices.Compact(slices.Clone(refusals)); len(c) != 1 {
		t.Fatalf("refusals differ: %v", refusals)
	}
	if len(ft.firings) != 0 {
		t.Fatalf("refused requests queued %d firings", len(ft.firings))
	}

	for i, want := range []bool{false, true} {
		hdr := []string{"X-Hub-Signature-256", sign(secret, body), "X-GitHub-Delivery", "d-1"}
		if i == 1 { // Atelier's scheme, the same delivery
			hdr = []string{"X-Atelier-Signature", sign(secret, stamped), "X-Atelier-Timestamp", ts, "X-Atelier-Delivery", "d-1"}
		}
		r := h.do("POST", hook, "", body, hdr...)
		wantStatus(t, r, http.StatusAccepted)
		var acc gen.HookAccepted
		r.json(t, &acc)
		if acc.Delivery != "d-1" || acc.Duplicate != want || !strings.HasPrefix(acc.Firing, "fir-") {
			t.Fatalf("attempt %d: %+v", i, acc)
		}
	}
	if len(ft.firings) != 1 || string(ft.firings[0].Payload) != string(body) || ft.firings[0].Source != "d-1" {
		t.Fatalf("firings %+v", ft.firings)
	}

	// Disabled: refused like a bad signature.
	wantStatus(t, h.do("PATCH", triggersPath+"/on-push", h.editor, map[string]any{"enabled": false}), http.StatusOK)
	wantProblem(t, h.do("POST", hook, "", body, "X-Hub-Signature-256", sign(secret, body)), http.StatusUnauthorized, "unauthenticated")
	list := h.do("GET", triggersPath+"/on-push/firings", h.viewer, nil)
	wantStatus(t, list, http.StatusOK)
	var firings gen.TriggerFiringList
	list.json(t, &firings)
	if len(firings.Items) != 1 || firings.Items[0].Source != "d-1" {
		t.Fatalf("%+v", firings)
	}
	wantStatus(t, h.do("DELETE", triggersPath+"/on-push", h.editor, nil), http.StatusNoContent)
	wantProblem(t, h.do("GET", triggersPath+"/on-push", h.editor, nil), http.StatusNotFound, "not-found")
}
