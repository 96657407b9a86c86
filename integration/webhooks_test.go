package integration

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
	"github.com/atelier-ml/atelier/internal/services/webhooks"
)

// receiver is a webhook endpoint that answers 500 to the first delivery
// of each event and 200 afterwards, and keeps every request.
type receiver struct {
	mu       sync.Mutex
	requests []received
	seen     map[string]int // event ID -> requests
}

type received struct {
	header http.Header
	body   []byte
	status int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	id := r.Header.Get(webhooks.HeaderEventID)
	rc.seen[id]++
	status := http.StatusOK
	if rc.seen[id] == 1 {
		status = http.StatusInternalServerError
	}
	rc.requests = append(rc.requests, received{header: r.Header.Clone(), body: body, status: status})
	w.WriteHeader(status)
	if status != http.StatusOK {
		_, _ = w.Write([]byte("receiver is warming up"))
	}
}

// accepted returns the payloads the receiver answered 200 to, by event type.
func (rc *receiver) accepted() map[string][]map[string]any {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	out := map[string][]map[string]any{}
	for _, r := range rc.requests {
		if r.status != http.StatusOK {
			continue
		}
		var p map[string]any
		if json.Unmarshal(r.body, &p) == nil {
			out[r.header.Get(webhooks.HeaderEvent)] = append(out[r.header.Get(webhooks.HeaderEvent)], p)
		}
	}
	return out
}

const webhookPipeline = `
steps:
  - name: gate
    kind: approval
    approval: {message: "train now?"}
  - {name: train, dependsOn: [gate], container: {command: ["sh", "-c", "echo diverged >&2; exit 3"]}}
onExit:
  - {name: report, container: {command: ["sh", "-c", "echo run ended {{ run.state }}"]}}
`

// Webhooks on the real stack: every event of a run (an approval request,
// a step failure, the run's end) reaches an HTTP receiver signed with the
// webhook's secret; a 500 is retried with backoff and the delivery log
// shows both attempts; another tenant can neither list nor read the
// webhook, a viewer cannot either, and bad URLs and events are 422s.
func TestWebhooksOnRealStack(t *testing.T) {
	s := newStack(t)
	rc := &receiver{seen: map[string]int{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	c := s.clientAs(s.token)

	// Bad input: an unknown event is refused by the schema (400), the
	// rest in one 422 naming every field.
	unknown, err := c.CreateWebhookWithResponse(ctx, s.project, gen.WebhookCreate{Url: "https://example.com/hook", Events: []gen.WebhookEvent{"run.started"}})
	require.NoError(t, err)
	require.Equal(t, 400, unknown.StatusCode(), "%s", unknown.Body)
	assert.Contains(t, string(unknown.Body), `"path":"events[0]"`)
	bad, err := c.CreateWebhookWithResponse(ctx, s.project, gen.WebhookCreate{
		Url: "ftp://example.com/hook", Events: []gen.WebhookEvent{"run.finished", "run.finished"}, Secret: ptrTo("short"),
	})
	require.NoError(t, err)
	require.Equal(t, 422, bad.StatusCode(), "%s", bad.Body)
	var prob gen.Problem
	require.NoError(t, json.Unmarshal(bad.Body, &prob))
	require.NotNil(t, prob.Errors)
	paths := map[string]bool{}
	for _, e := range *prob.Errors {
		paths[e.Path] = true
	}
	assert.Equal(t, map[string]bool{"url": true, "events[1]": true, "secret": true}, paths)
	// A secret that would read as a sealed one is refused.
	reserved, err := c.CreateWebhookWithResponse(ctx, s.project, gen.WebhookCreate{
		Url: "https://example.com/hook", Events: []gen.WebhookEvent{"run.finished"}, Secret: ptrTo("sealed:v1:0123456789abcdef"),
	})
	require.NoError(t, err)
	require.Equal(t, 422, reserved.StatusCode(), "%s", reserved.Body)
	assert.Contains(t, string(reserved.Body), `must not start with \"sealed:\"`)

	created, err := c.CreateWebhookWithResponse(ctx, s.project, gen.WebhookCreate{
		Url:         srv.URL + "/hooks/atelier",
		Events:      []gen.WebhookEvent{"run.finished", "step.failed", "approval.requested"},
		Description: ptrTo("CI receiver"),
	})
	require.NoError(t, err)
	require.Equal(t, 201, created.StatusCode(), "%s", created.Body)
	require.NotNil(t, created.JSON201.Secret, "a generated secret is returned once")
	secret := *created.JSON201.Secret
	hook := created.JSON201.Webhook
	assert.Equal(t, "no-store", created.HTTPResponse.Header.Get("Cache-Control"))

	got, err := c.GetWebhookWithResponse(ctx, s.project, hook.Id)
	require.NoError(t, err)
	require.Equal(t, 200, got.StatusCode())
	assert.NotContains(t, string(got.Body), secret, "the secret is never served back")

	// Tenancy and roles.
	_, err = s.store.CreateProject(ctx, catalog.Project{Name: "team-b"})
	require.NoError(t, err)
	other, hash := tokens.New()
	_, err = s.store.CreateToken(ctx, catalog.Token{Name: "b-editor", Project: "team-b", Role: tokens.RoleEditor}, hash)
	require.NoError(t, err)
	oc := s.clientAs(other)
	ol, err := oc.ListWebhooksWithResponse(ctx, s.project)
	require.NoError(t, err)
	assert.Equal(t, 404, ol.StatusCode(), "another tenant cannot list team-a's webhooks")
	og, err := oc.GetWebhookWithResponse(ctx, s.project, hook.Id)
	require.NoError(t, err)
	assert.Equal(t, 404, og.StatusCode())
	ogb, err := oc.GetWebhookWithResponse(ctx, "team-b", hook.Id)
	require.NoError(t, err)
	assert.Equal(t, 404, ogb.StatusCode(), "nor read it through its own project")
	od, err := oc.ListWebhookDeliveriesWithResponse(ctx, "team-b", hook.Id, nil)
	require.NoError(t, err)
	assert.Equal(t, 404, od.StatusCode())
	odel, err := oc.DeleteWebhookWithResponse(ctx, "team-b", hook.Id)
	require.NoError(t, err)
	assert.Equal(t, 404, odel.StatusCode())
	vl, err := s.clientAs(s.newToken("viewer", tokens.RoleViewer)).ListWebhooksWithResponse(ctx, s.project)
	require.NoError(t, err)
	assert.Equal(t, 403, vl.StatusCode(), "webhook URLs may hold credentials: editors only")

	// A run that asks for approval, then fails.
	s.createPipeline("hooked", webhookPipeline)
	id := s.start("hooked", nil)
	s.waitStepState(id, "gate", gen.StepStateWAITINGFORAPPROVAL)
	code, _, body := s.decide(id, "gate", "approve", s.token, ptrTo("go"))
	require.Equal(t, 200, code, "%s", body)
	r := s.waitTerminal(id, 60*time.Second)
	require.Equal(t, gen.RunStateFAILED, r.State)

	var log []gen.WebhookDelivery
	require.Eventually(t, func() bool {
		d, err := c.ListWebhookDeliveriesWithResponse(ctx, s.project, hook.Id, nil)
		if err != nil || d.JSON200 == nil {
			return false
		}
		log = d.JSON200.Items
		done := 0
		for _, x := range log {
			if x.State == "succeeded" {
				done++
			}
		}
		return done == 3
	}, 30*time.Second, 100*time.Millisecond, "three deliveries succeed: %+v", log)

	events := map[gen.WebhookEvent]gen.WebhookDelivery{}
	for _, d := range log {
		assert.Equal(t, id, d.RunId)
		require.Len(t, d.Log, 2, "a 500, then a success: %+v", d)
		assert.Equal(t, 500, *d.Log[0].StatusCode)
		assert.Contains(t, *d.Log[0].Error, "receiver is warming up")
		assert.Equal(t, 200, *d.Log[1].StatusCode)
		assert.Nil(t, d.Log[1].Error)
		assert.False(t, d.Log[1].StartedAt.Before(d.Log[0].StartedAt.Add(150*time.Millisecond)), "the retry waited for its backoff")
		events[d.Event] = d
	}
	require.Len(t, events, 3)
	assert.Equal(t, "train", val(events["step.failed"].Step))
	assert.Equal(t, "gate", val(events["approval.requested"].Step))

	// What the receiver got: signed, with the events' payloads.
	rc.mu.Lock()
	for _, req := range rc.requests {
		assert.NoError(t, webhooks.Verify(secret, req.header.Get(webhooks.HeaderTimestamp), req.header.Get(webhooks.HeaderSignature), req.body, time.Now(), 5*time.Minute))
		assert.Error(t, webhooks.Verify("not-the-secret-at-all", req.header.Get(webhooks.HeaderTimestamp), req.header.Get(webhooks.HeaderSignature), req.body, time.Now(), 0))
	}
	rc.mu.Unlock()
	acc := rc.accepted()
	require.Len(t, acc["run.finished"], 1)
	fin := acc["run.finished"][0]
	run := fin["run"].(map[string]any)
	assert.Equal(t, "FAILED", run["state"])
	assert.Equal(t, []any{"train"}, run["failedSteps"])
	assert.Equal(t, s.project, fin["project"])
	require.Len(t, acc["step.failed"], 1)
	assert.Equal(t, "train", acc["step.failed"][0]["step"].(map[string]any)["name"])
	// What the step printed stays in the platform: the errors say how it
	// ended, not its output (a webhook opts in with includeStepOutput).
	assert.Equal(t, "command exited with code 3 (output left out)", acc["step.failed"][0]["step"].(map[string]any)["error"])
	for typ, bodies := range acc {
		for _, b := range bodies {
			raw, _ := json.Marshal(b)
			assert.NotContains(t, string(raw), "diverged", "%s carries the step's output", typ)
		}
	}
	assert.Equal(t, "RUNNING", acc["step.failed"][0]["run"].(map[string]any)["state"], "sent when the step failed, not at the run's end")
	require.Len(t, acc["approval.requested"], 1)
	ap := acc["approval.requested"][0]["step"].(map[string]any)["approval"].(map[string]any)
	assert.Equal(t, "train now?", ap["message"])
	assert.Equal(t, events["run.finished"].EventId, fin["id"])

	// Disabled, it gets nothing; deleted, it is gone.
	off, err := c.UpdateWebhookWithResponse(ctx, s.project, hook.Id, gen.WebhookUpdate{Enabled: ptrTo(false)})
	require.NoError(t, err)
	require.Equal(t, 200, off.StatusCode(), "%s", off.Body)
	assert.False(t, off.JSON200.Enabled)
	del, err := c.DeleteWebhookWithResponse(ctx, s.project, hook.Id)
	require.NoError(t, err)
	assert.Equal(t, 204, del.StatusCode())
	gone, err := c.GetWebhookWithResponse(ctx, s.project, hook.Id)
	require.NoError(t, err)
	assert.Equal(t, 404, gone.StatusCode())
}
