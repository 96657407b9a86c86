package integration

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
)

const (
	triggerPrepPipeline = `
params:
  - {name: lr, type: number, default: 0.1}
steps:
  - name: make
    container: {command: [sh, -c, 'echo "{\"path\": \"/data/v7\"}" > "$ATELIER_OUTPUTS"']}
`
	triggerTrainPipeline = `
params:
  - {name: dataset, type: string}
  - {name: lr, type: number}
steps:
  - name: fit
    container: {command: [sh, -c, 'echo "{\"trained\": \"{{ params.dataset }}\"}" > "$ATELIER_OUTPUTS"']}
`
)

// Run triggers on the real stack: when a prep run SUCCEEDS, the gateway's
// dispatcher starts the train pipeline with params read from it (a step's
// output, its params), exactly once however often its final status is
// mirrored again; the firing log names the run, which Temporal lists as
// started by the trigger. A trigger whose params cannot be rendered
// fails its firing with the reason and starts nothing.
func TestRunFinishedTriggerOnTheRealStack(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	s.createPipeline("prep", triggerPrepPipeline)
	s.createPipeline("train", triggerTrainPipeline)
	c := s.client()
	on := gen.TriggerOn{RunFinished: &gen.TriggerRunFinished{Pipeline: "prep"}}
	params := map[string]any{"dataset": "{{ upstream.steps.make.outputs.path }}", "lr": "{{ upstream.params.lr }}"}
	res, err := c.CreateTriggerWithResponse(ctx, s.project, gen.TriggerCreate{Name: "retrain", On: on, Pipeline: "train", Params: &params})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
	badParams := map[string]any{"dataset": "{{ upstream.outputs.missing }}", "lr": 1}
	res, err = c.CreateTriggerWithResponse(ctx, s.project, gen.TriggerCreate{Name: "broken", On: on, Pipeline: "train", Params: &badParams})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)

	up := s.waitTerminal(s.start("prep", map[string]any{"lr": 0.25}), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, up.State, "%s", val(up.Status.Error))

	firing := waitFiring(t, s, "retrain", catalog.FiringStarted)
	assert.Equal(t, up.Id, firing.Source)
	require.NotNil(t, firing.RunId)
	down := s.waitTerminal(*firing.RunId, time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, down.State, "%s", val(down.Status.Error))
	assert.Equal(t, "trigger:retrain", val(down.CreatedBy))
	assert.Equal(t, "train", val(down.Pipeline))
	assert.Equal(t, map[string]any{"trained": "/data/v7"}, stepByName(down, "fit").Outputs)
	assert.Equal(t, map[string]any{"dataset": "/data/v7", "lr": 0.25}, val(down.Status.Params))
	assert.Equal(t, map[string]any{"dataset": "/data/v7", "lr": 0.25}, val(firing.Params), "the firing records what it started")
	assert.Contains(t, temporalCLI(t, s, "workflow", "list", "--query", `AtelierCreatedBy="trigger:retrain"`), *firing.RunId)

	failed := waitFiring(t, s, "broken", catalog.FiringFailed)
	assert.Contains(t, val(failed.Error), `{{ upstream.outputs.missing }}: upstream.outputs is not an object`, "prep declares no outputs")
	assert.Nil(t, failed.RunId)

	// The upstream run's final status written again (a reconciler sweep,
	// a mirror retried): no second firing, no second run.
	raw, err := s.store.GetRun(ctx, s.project, up.Id)
	require.NoError(t, err)
	require.NoError(t, s.store.MirrorRun(ctx, *raw.Status))
	time.Sleep(2 * time.Second) // two dispatcher polls
	list, err := c.ListTriggerFiringsWithResponse(ctx, s.project, "retrain", nil)
	require.NoError(t, err)
	require.Len(t, list.JSON200.Items, 1, "one firing per upstream run")
	runs, err := c.ListRunsWithResponse(ctx, s.project, &gen.ListRunsParams{Pipeline: ptrTo(gen.PipelineName("train"))})
	require.NoError(t, err)
	assert.Len(t, runs.JSON200.Runs, 1, "one run per upstream run")
}

// A hook trigger on the real stack: a signed POST (no token) starts a run
// with params from its body; the same delivery again starts nothing more;
// an unsigned one is a 401.
func TestHookTriggerOnTheRealStack(t *testing.T) {
	s := newStack(t)
	ctx := context.Background()
	s.createPipeline("train", triggerTrainPipeline)
	params := map[string]any{"dataset": "s3://bucket/{{ body.ref }}", "lr": "{{ body.lr }}"}
	res, err := s.client().CreateTriggerWithResponse(ctx, s.project, gen.TriggerCreate{
		Name: "on-upload", On: gen.TriggerOn{Hook: &map[string]any{}}, Pipeline: "train", Params: &params,
	})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, res.StatusCode(), "%s", res.Body)
	secret, hookURL := val(res.JSON201.Secret), s.url+val(res.JSON201.Trigger.HookUrl)

	body := []byte(`{"ref": "uploads/42.csv", "lr": 0.5}`)
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	post := func(sig, delivery string) (int, gen.HookAccepted) {
		req, err := http.NewRequest("POST", hookURL, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if sig != "" {
			req.Header.Set("X-Atelier-Signature", sig)
			req.Header.Set("X-Atelier-Timestamp", ts)
		}
		req.Header.Set("X-Atelier-Delivery", delivery)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var acc gen.HookAccepted
		if resp.StatusCode == http.StatusAccepted {
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&acc))
		}
		return resp.StatusCode, acc
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	sig := "sha256=" + hex.EncodeToString(mac.Sum(nil))

	code, _ := post("", "up-1")
	assert.Equal(t, http.StatusUnauthorized, code)
	code, acc := post(sig, "up-1")
	require.Equal(t, http.StatusAccepted, code)
	assert.False(t, acc.Duplicate)
	code, acc = post(sig, "up-1")
	require.Equal(t, http.StatusAccepted, code)
	assert.True(t, acc.Duplicate, "the same delivery is fired once")

	firing := waitFiring(t, s, "on-upload", catalog.FiringStarted)
	assert.Equal(t, "up-1", firing.Source)
	down := s.waitTerminal(val(firing.RunId), time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, down.State, "%s", val(down.Status.Error))
	assert.Equal(t, map[string]any{"dataset": "s3://bucket/uploads/42.csv", "lr": 0.5}, val(down.Status.Params))
	assert.Equal(t, "trigger:on-upload", val(down.CreatedBy))

	// The CLI: a second hook trigger (its URL and secret printed once),
	// the firing log with the run, and a bad trigger's every problem.
	config := filepath.Join(t.TempDir(), "config.yaml")
	require.Equal(t, 0, atelierCLI(t, config, "login", s.url, "--token", s.token, "--project", s.project).code)
	cr := atelierCLI(t, config, "triggers", "create", "nightly-import", "--pipeline", "train", "--hook", "-p", "dataset={{ body.ref }}", "-p", "lr=0.1")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Contains(t, cr.stderr, "hook URL: "+s.url+"/v1/hooks/"+s.project+"/nightly-import")
	assert.Regexp(t, `secret \(shown once.*\): hksec_[0-9a-f]{64}`, cr.stderr)
	cr = atelierCLI(t, config, "triggers", "firings", "on-upload")
	require.Equal(t, 0, cr.code, "%s", cr.stderr)
	assert.Regexp(t, `(?m)up-1\s+started\s+1\s+`+val(firing.RunId), cr.stdout)
	cr = atelierCLI(t, config, "triggers", "create", "loop", "--pipeline", "train", "--on-run-finished", "train", "--state", "running", "-p", "nope={{ upstream.x }}")
	require.Equal(t, 1, cr.code)
	for _, want := range []string{"on.runFinished.pipeline", "on.runFinished.states[0]", "params.nope"} {
		assert.Contains(t, cr.stderr, want)
	}
}

// waitFiring waits for trigger's newest firing to reach state.
func waitFiring(t *testing.T, s *stack, trigger, state string) gen.TriggerFiring {
	t.Helper()
	var last gen.TriggerFiring
	require.Eventually(t, func() bool {
		res, err := s.client().ListTriggerFiringsWithResponse(context.Background(), s.project, trigger, nil)
		if err != nil || res.JSON200 == nil || len(res.JSON200.Items) == 0 {
			return false
		}
		last = res.JSON200.Items[0]
		return string(last.State) == state
	}, 30*time.Second, 100*time.Millisecond, "trigger %s: no firing reached %s (last %+v)", trigger, state, last)
	return last
}
