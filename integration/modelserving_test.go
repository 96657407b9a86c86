package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/platform/tokens"
)

// trainSentimentPipeline registers each run's model.bin ("weights-<seed>")
// as the next version of the model "sentiment".
const trainSentimentPipeline = `
params:
  - {name: seed, type: string}
steps:
  - name: train
    container:
      command: [sh, -c, 'printf "weights-%s" "$SEED" > "$ATELIER_ARTIFACTS/model.bin"']
      env: {SEED: "{{ params.seed }}"}
      artifacts:
        outputs: [{name: model, path: model.bin, register: sentiment}]
`

// registerSentimentVersions runs trainSentimentPipeline twice (seeds "a"
// and "b") and waits until both versions of "sentiment" are registered;
// it returns their digests by version number.
func (s *stack) registerSentimentVersions(t *testing.T) map[int]string {
	t.Helper()
	s.createPipeline("train-sentiment", trainSentimentPipeline)
	digests := map[int]string{}
	for i, seed := range []string{"a", "b"} {
		r := s.waitTerminal(s.start("train-sentiment", map[string]any{"seed": seed}), time.Minute)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
		digests[i+1] = val(stepByName(r, "train").Artifacts)[0].Digest
	}
	require.Eventually(t, func() bool {
		code, body := s.raw("GET", s.path("/models/sentiment/versions/2"), nil)
		return code == 200 && strings.Contains(string(body), digests[2])
	}, 10*time.Second, 100*time.Millisecond, "both runs registered a version")
	return digests
}

// revisionServes is an endpoint whose stable revision is rev, with a
// ready replica and no rollout.
func revisionServes(rev int) func(gen.Endpoint) bool {
	return func(v gen.Endpoint) bool {
		if v.Stable != rev || v.Rollout != nil {
			return false
		}
		for _, o := range v.Observed {
			if o.Revision == rev && o.Ready == 1 {
				return true
			}
		}
		return false
	}
}

// An endpoint serving a registered model on the real stack: two training
// runs register versions 1 and 2 of "sentiment"; an endpoint on the local
// runtime follows sentiment@champion, and its replica (examples/modelserver
// standing in for vLLM) loads the bytes the worker fetched from the
// artifact store: its X-Model-Weights header, through the gateway's proxy,
// is the version's digest. Moving the alias over REST rolls out a revision
// serving version 2; REST says which endpoints serve which version, and a
// version that a revision the endpoint keeps references cannot be deleted
// until the endpoint is. Another project sees none of it, and bad
// references are 422 at their path.
func TestEndpointServesARegisteredModel(t *testing.T) {
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	s.cleanupEndpoint(t)
	digests := s.registerSentimentVersions(t)
	code, body := s.raw("PUT", s.path("/models/sentiment/aliases/champion"), []byte(`{"version": 1}`))
	require.Equal(t, 200, code, "%s", body)

	spec := map[string]any{"backend": "vllm", "model": map[string]any{"ref": "sentiment@champion", "follow": true},
		"image": "vllm/vllm-openai:v0.9.1", "args": []string{"--startup-delay", "200ms"}, "replicas": map[string]any{"min": 1, "max": 1},
		"rollout": map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}}
	s.createEndpoint(t, "", spec)
	s.waitEndpoint(t, 90*time.Second, "served revision 1", revisionServes(1))
	code, body = s.raw("GET", s.path("/endpoints/chat"), nil)
	require.Equal(t, 200, code)
	assert.Contains(t, string(body), `"registered":{"model":"sentiment","version":1,"alias":"champion"`, "the revision records the version it serves")
	assert.Equal(t, digests[1], s.servedWeights(t), "the replica loaded version 1's bytes")

	// Which endpoints serve the model; a served version is not deleted.
	var serving gen.ModelServingList
	code, body = s.raw("GET", s.path("/models/sentiment/endpoints"), nil)
	require.Equal(t, 200, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &serving))
	require.Len(t, serving.Items, 1)
	assert.Equal(t, gen.ModelServing{Endpoint: "chat", Revision: 1, Role: gen.Stable, Version: 1, Ref: "sentiment@champion", Follow: true,
		Run: serving.Items[0].Run}, serving.Items[0])
	code, body = s.raw("DELETE", s.path("/models/sentiment/versions/1"), nil)
	require.Equal(t, 409, code, "%s", body)
	assert.Contains(t, string(body), "referenced by endpoint chat (revision 1: stable)")

	// Moving the alias rolls out version 2.
	code, body = s.raw("PUT", s.path("/models/sentiment/aliases/champion"), []byte(`{"version": 2}`))
	require.Equal(t, 200, code, "%s", body)
	v := s.waitEndpoint(t, 90*time.Second, "served revision 2 after the alias moved", revisionServes(2))
	assert.Contains(t, eventLine(v), "revision 2 created: sentiment@champion moved from version 1 to 2")
	require.Eventually(t, func() bool { return s.servedWeights(t) == digests[2] }, 20*time.Second, 200*time.Millisecond,
		"the endpoint serves version 2's bytes")
	// Version 1 is no longer served, but revision 1 is kept for rollback:
	// it still cannot be deleted.
	code, body = s.raw("DELETE", s.path("/models/sentiment/versions/1"), nil)
	require.Equal(t, 409, code, "%s", body)
	assert.Contains(t, string(body), "referenced by endpoint chat (revision 1: kept for rollback)")

	// An inference step pins version 1 (no follow): the step ends once the
	// revision serving it is promoted.
	s.createPipeline("pin-sentiment", `
steps:
  - name: deploy
    kind: inference
    inference:
      endpoint: chat
      spec:
        backend: vllm
        model: {ref: "sentiment@1"}
        image: vllm/vllm-openai:v0.9.1
        args: ["--startup-delay", "200ms"]
        replicas: {min: 1, max: 1}
        rollout: {gates: {maxErrorRate: 1, analysisInterval: 1s}}
`)
	pin := s.waitTerminal(s.start("pin-sentiment", nil), 2*time.Minute)
	require.Equal(t, gen.RunStateSUCCEEDED, pin.State, "%s", val(pin.Status.Error))
	assert.Equal(t, digests[1], s.servedWeights(t), "the pinned revision serves version 1's bytes")
	code, body = s.raw("GET", s.path("/models/sentiment/endpoints"), nil)
	require.Equal(t, 200, code, "%s", body)
	assert.Contains(t, string(body), `"revision":3,"role":"stable","version":1,"ref":"sentiment@1","follow":false`)

	// Version 1 is served by revision 3 and kept for rollback by
	// revision 1; version 2 by revision 2 (model_version_refs): neither
	// can go, even once no alias names version 2.
	code, body = s.raw("DELETE", s.path("/models/sentiment/versions/1"), nil)
	require.Equal(t, 409, code, "%s", body)
	assert.Contains(t, string(body), "referenced by endpoint chat (revision 1: kept for rollback; revision 3: stable)")
	code, body = s.raw("DELETE", s.path("/models/sentiment/aliases/champion"), nil)
	require.Equal(t, 204, code, "%s", body)
	code, body = s.raw("DELETE", s.path("/models/sentiment/versions/2"), nil)
	require.Equal(t, 409, code, "%s", body)
	assert.Contains(t, string(body), "referenced by endpoint chat (revision 2: kept for rollback)")
	code, _ = s.raw("DELETE", s.path("/models/sentiment/versions/champion"), nil)
	assert.Equal(t, 422, code, "versions are deleted by number")
	// A rollback to revision 2 can still load version 2's bytes.
	code, body = s.raw("GET", s.path("/models/sentiment/versions/2"), nil)
	require.Equal(t, 200, code, "%s", body)

	// Bad references, every problem at its path.
	for _, bad := range []struct {
		model               map[string]any
		cluster, path, says string
	}{
		{map[string]any{"ref": "sentiment@nope"}, "", "spec.model.ref", `no version or alias \"nope\"`},
		{map[string]any{"ref": "sentiment@2", "follow": true}, "", "spec.model.follow", "follow needs model.ref to name an alias"},
	} {
		sp := map[string]any{}
		for k, x := range spec {
			sp[k] = x
		}
		sp["model"] = bad.model
		b, err := json.Marshal(map[string]any{"name": "bad", "cluster": bad.cluster, "spec": sp})
		require.NoError(t, err)
		code, body = s.raw("POST", s.path("/endpoints"), b)
		require.Equal(t, 422, code, "%s", body)
		assert.Contains(t, string(body), `"path":"`+bad.path+`"`)
		assert.Contains(t, string(body), bad.says)
	}

	// Tenancy.
	other := s.asProject("other-serving")
	code, _ = other.raw("GET", other.path("/models/sentiment/endpoints"), nil)
	assert.Equal(t, 404, code)
	code, _ = other.raw("DELETE", other.path("/models/sentiment/versions/2"), nil)
	assert.Equal(t, 404, code)
	code, _ = other.raw("PUT", other.path("/models/sentiment/aliases/champion"), []byte(`{"version": 1}`))
	assert.Equal(t, 404, code)
	b, err := json.Marshal(map[string]any{"name": "stolen", "spec": spec})
	require.NoError(t, err)
	code, body = other.raw("POST", other.path("/endpoints"), b)
	require.Equal(t, 422, code, "another project's model is unknown here: %s", body)
	assert.Contains(t, string(body), "no model sentiment in project other-serving")

	// Once the endpoint is deleted, its references go with it: both
	// versions can be deleted, and then neither resolves nor lists; a
	// number is not given again.
	s.deleteEndpoint(t)
	for _, n := range []string{"2", "1"} {
		code, body = s.raw("DELETE", s.path("/models/sentiment/versions/%s", n), nil)
		require.Equal(t, 204, code, "version %s once the endpoint is deleted: %s", n, body)
	}
	code, _ = s.raw("GET", s.path("/models/sentiment/versions/2"), nil)
	assert.Equal(t, 404, code)
	code, body = s.raw("GET", s.path("/models/sentiment"), nil)
	require.Equal(t, 200, code)
	assert.Contains(t, string(body), `"latest":0`, "the latest is the highest version not deleted")
	code, body = s.raw("GET", s.path("/models/sentiment/endpoints"), nil)
	require.Equal(t, 200, code, "%s", body)
	assert.JSONEq(t, `{"items":[]}`, string(body))
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		recordHistory(t, s, "v11-endpoint-follows-model", activities.EndpointWorkflowID(s.project, "chat"))
		res, err := s.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowType = %q AND WorkflowId STARTS_WITH %q", activities.MoveModelAliasWorkflowName, "atelier-model-alias/"+s.project+"/"),
		})
		require.NoError(t, err)
		require.NotEmpty(t, res.Executions)
		recordHistory(t, s, "v11-model-alias-moved", res.Executions[0].GetExecution().GetWorkflowId())
	}
}

// servedWeights sends a completion for "sentiment" to chat through the
// gateway (servedWeightsOf).
func (s *stack) servedWeights(t *testing.T) string { return s.servedWeightsOf(t, "sentiment") }

// Train → evaluate → approve → promote on the real stack, with an endpoint
// following the alias: each run trains two candidates (their outputs
// registered as versions of "ranker"), an evaluation step reads both
// models and names the better, an approval gates the move, and a promote
// step points champion at the winner's version. The endpoint following
// ranker@champion serves run 1's winner, then rolls out run 2's once that
// run promotes it; the alias history names the runs; lineage leads from the
// endpoint's revision back to the run and step that trained it. With
// ATELIER_RECORD_HISTORIES=1 it records v11-promote.
func TestPipelinePromotesTheWinnerToAFollowingEndpoint(t *testing.T) {
	engine := modelserverBinary(t)
	s := newStack(t, stackOptions{localEngines: map[string]string{"vllm": engine}})
	s.cleanupEndpoint(t)
	b, err := os.ReadFile("../examples/pipelines/train-promote.yaml")
	require.NoError(t, err)
	s.createPipeline("train-promote", string(b))
	editor := s.newToken("promote-approver", tokens.RoleEditor)
	run := func(a, b, winner string) (gen.Run, string) {
		id := s.start("train-promote", map[string]any{"a": a, "b": b})
		s.waitStepState(id, "approve", gen.StepStateWAITINGFORAPPROVAL)
		code, _, body := s.decide(id, "approve", "approve", editor, nil)
		require.Equal(t, 200, code, "%s", body)
		r := s.waitTerminal(id, 2*time.Minute)
		require.Equal(t, gen.RunStateSUCCEEDED, r.State, "%s", val(r.Status.Error))
		return r, val(stepByName(r, winner).Artifacts)[0].Digest
	}
	first, firstDigest := run("90", "80", "train-a")
	promote := stepByName(first, "promote")
	require.NotNil(t, promote.Outputs)
	v1 := int(promote.Outputs.(map[string]any)["version"].(float64))
	code, body := s.raw("GET", s.path("/models/ranker/versions/champion"), nil)
	require.Equal(t, 200, code, "%s", body)
	assert.Contains(t, string(body), fmt.Sprintf(`"version":%d`, v1))
	assert.Contains(t, string(body), firstDigest, "champion is run 1's train-a model")

	spec := map[string]any{"backend": "vllm", "model": map[string]any{"ref": "ranker@champion", "follow": true},
		"image": "vllm/vllm-openai:v0.9.1", "args": []string{"--startup-delay", "200ms"}, "replicas": map[string]any{"min": 1, "max": 1},
		"rollout": map[string]any{"gates": map[string]any{"maxErrorRate": 1, "analysisInterval": "1s"}}}
	s.createEndpoint(t, "", spec)
	s.waitEndpoint(t, 90*time.Second, "served revision 1", func(v gen.Endpoint) bool { return v.Stable == 1 && v.Rollout == nil })
	assert.Equal(t, firstDigest, s.servedWeightsOf(t, "ranker"))

	second, secondDigest := run("70", "95", "train-b")
	v := s.waitEndpoint(t, 90*time.Second, "served revision 2 after the promote", func(v gen.Endpoint) bool { return v.Stable == 2 && v.Rollout == nil })
	assert.Contains(t, eventLine(v), "ranker@champion moved from version")
	require.Eventually(t, func() bool { return s.servedWeightsOf(t, "ranker") == secondDigest }, 20*time.Second, 200*time.Millisecond,
		"the endpoint serves run 2's train-b model")

	// The version carries its run's metrics.
	code, body = s.raw("GET", s.path("/models/ranker/versions/champion"), nil)
	require.Equal(t, 200, code, "%s", body)
	var champ gen.ModelVersion
	require.NoError(t, json.Unmarshal(body, &champ))
	require.NotNil(t, champ.RunMetrics, "%s", body)
	assert.Equal(t, map[string]float64{"train-a.score": 70, "train-b.score": 95}, *champ.RunMetrics)

	// Who moved the alias, and where the served model came from.
	code, body = s.raw("GET", s.path("/models/ranker/alias-events"), nil)
	require.Equal(t, 200, code)
	assert.Contains(t, string(body), `"actor":"run `+second.Id+`"`)
	assert.Contains(t, string(body), `"actor":"run `+first.Id+`"`)
	var serving gen.ModelServingList
	code, body = s.raw("GET", s.path("/models/ranker/endpoints"), nil)
	require.Equal(t, 200, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &serving))
	require.Len(t, serving.Items, 1)
	assert.Equal(t, second.Id, val(serving.Items[0].Run), "the served version was trained by run 2")
	art := val(stepByName(second, "train-b").Artifacts)[0]
	code, body = s.raw("GET", s.path("/artifacts/%s", art.Id), nil)
	require.Equal(t, 200, code, "%s", body)
	assert.Contains(t, string(body), `"step":"train-b"`)
	assert.Contains(t, string(body), `"step":"evaluate"`, "lineage names the evaluation that read it")

	s.deleteEndpoint(t)
	if os.Getenv("ATELIER_RECORD_HISTORIES") != "" {
		recordHistory(t, s, "v11-promote", second.Id)
	}
}

// servedWeightsOf sends a completion for model to chat through the
// gateway and answers the weights its replica loaded (X-Model-Weights),
// "" when the gateway cannot be reached, "status N" when it refuses.
func (s *stack) servedWeightsOf(t *testing.T, model string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.url+s.path("/endpoints/chat/v1/completions"),
		strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"hi","max_tokens":2}`, model)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		return fmt.Sprintf("status %d", res.StatusCode)
	}
	return res.Header.Get("X-Model-Weights")
}
