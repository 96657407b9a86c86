package pipeline

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/inference"
)

// inferenceOpts is a gateway with a registered cluster.
var inferenceOpts = ValidateOptions{Kinds: []StepKind{KindContainer, KindRay, KindSpark, KindInference}, Kubernetes: true}

// trainDeploy trains, then deploys what it trained as a canary.
const trainDeploy = `
params:
  - {name: image, type: string, default: "vllm/vllm-openai:v0.9.1"}
steps:
  - name: train
    container: {command: [train]}
  - name: deploy
    kind: inference
    timeout: 1h
    retries: {limit: 1}
    inference:
      endpoint: chat
      cluster: gpu-a
      spec:
        backend: vllm
        model: {uri: "{{ steps.train.outputs.model }}", name: tiny}
        image: "{{ params.image }}"
        args: [--max-model-len=4096]
        env: [{name: RUN, value: "{{ run.id }}"}]
        resources: {gpus: 1, gpuType: NVIDIA-L4}
        replicas: {min: 1, max: 3}
        autoscaling: {stableWindow: 30s}
        rollout:
          strategy: canary
          canary: {steps: [{weight: 20, pause: 1m}, {weight: 50}]}
          gates: {maxErrorRate: 0.05, minSamples: 20}
`

func TestInferenceStepValidates(t *testing.T) {
	p := mustParse(t, trainDeploy)
	if err := Validate(p, inferenceOpts); err != nil {
		t.Fatal(err)
	}
	// The model URI references train: deploy waits for it.
	if diff := cmp.Diff([][]int{{}, {0}}, Dependencies(p)); diff != "" {
		t.Fatalf("Dependencies (-want +got):\n%s", diff)
	}
	inf := p.Steps[1].Inference
	if got := inf.Spec.Autoscaling.StableWindow.D().String(); got != "30s" {
		t.Errorf("stableWindow = %s, want 30s", got)
	}
	if got := inf.Spec.Rollout.Canary.Steps[0].Pause.D().String(); got != "1m0s" {
		t.Errorf("canary pause = %s, want 1m0s", got)
	}
}

func TestRenderInference(t *testing.T) {
	p := mustParse(t, trainDeploy)
	before := *p.Steps[1].Inference
	env := Env{
		Params: map[string]any{"image": "vllm/vllm-openai:v0.9.2"},
		Steps:  map[string]StepEnv{"train": {Outputs: map[string]any{"model": "s3://models/run-1"}}},
		Run:    RunEnv{ID: "run-1"},
	}
	got, err := RenderInference(p.Steps[1].Inference, env)
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Model.URI != "s3://models/run-1" || got.Spec.Image != "vllm/vllm-openai:v0.9.2" ||
		got.Spec.Env[0].Value != "run-1" || got.Endpoint != "chat" || got.Cluster != "gpu-a" {
		t.Errorf("rendered = %+v", got)
	}
	// Everything that held no template is as written, numbers and
	// durations included.
	g := *got
	g.Spec.Model.URI, g.Spec.Image, g.Spec.Env = before.Spec.Model.URI, before.Spec.Image, before.Spec.Env
	if !reflect.DeepEqual(g, before) {
		t.Errorf("untemplated fields changed:\n%s", cmp.Diff(before, g))
	}
	// The step's own spec is untouched, for the next item or attempt.
	if !reflect.DeepEqual(*p.Steps[1].Inference, before) {
		t.Error("RenderInference modified its input")
	}

	if _, err := RenderInference(p.Steps[1].Inference, Env{Params: env.Params, Run: env.Run,
		Steps: map[string]StepEnv{"train": {Outputs: map[string]any{}}}}); err == nil ||
		!strings.Contains(err.Error(), "spec.model.uri") {
		t.Errorf("missing output: err = %v, want one naming spec.model.uri", err)
	}
}

func TestValidateInference(t *testing.T) {
	local := ValidateOptions{Kinds: []StepKind{KindContainer, KindInference}, LocalEndpoints: true}
	cases := []struct {
		name string
		spec string
		opts ValidateOptions
		want []want
	}{
		{"pod settings: literal, and on a cluster", `
params: [{name: pool, type: string, default: a}]
steps:
  - {name: a, kind: inference, inference: {endpoint: chat, cluster: gpu-a, spec: {backend: vllm, model: {name: m}, image: i, pod: {nodeSelector: {pool: "{{ params.pool }}"}}}}}
  - {name: b, kind: inference, inference: {endpoint: chat2, spec: {backend: vllm, model: {name: m}, image: i, pod: {labels: {team: x}}}}}`,
			ValidateOptions{Kinds: []StepKind{KindContainer, KindInference}, Kubernetes: true, LocalEndpoints: true}, []want{
				{"steps[0].inference.spec.pod", "templates are not supported in pod settings"},
				{"steps[1].inference.spec.pod", "pod settings apply to endpoints on a Kubernetes cluster"},
			}},
		{"endpoint names", `
steps:
  - {name: a, kind: inference, inference: {endpoint: Chat_1, cluster: gpu-a, spec: {backend: vllm, model: {name: m}, image: i}}}
  - {name: b, kind: inference, inference: {cluster: gpu-a, spec: {backend: vllm, model: {name: m}, image: i}}}
  - {name: c, kind: inference, inference: {endpoint: "chat-{{ params.env }}", cluster: gpu-a, spec: {backend: vllm, model: {name: m}, image: i}}}
  - {name: d, kind: inference, inference: {endpoint: a-very-long-endpoint-name-that-goes-past-41-characters, cluster: gpu-a, spec: {backend: vllm, model: {name: m}, image: i}}}`,
			inferenceOpts, []want{
				{"steps[0].inference.endpoint", `invalid endpoint name "Chat_1": use lowercase letters, digits and '-', starting with a letter, at most 41 characters`},
				{"steps[1].inference.endpoint", "required: the endpoint's name in the run's project"},
				{"steps[2].inference.endpoint", `in {{ params.env }}: unknown param "env"`},
				{"steps[3].inference.endpoint", "invalid endpoint name"},
			}},
		{"every problem of the spec, at its path", `
steps:
  - name: deploy
    kind: inference
    inference:
      endpoint: chat
      cluster: gpu-a
      spec:
        backend: tgi
        model: {uri: models}
        args: [--port=9000]
        env: [{name: A, value: a}, {name: A, value: b}]
        resources: {gpus: 2}
        replicas: {min: 3, max: 2}
        rollout:
          strategy: canary
          canary: {steps: [{weight: 20}, {weight: 10}]}
          gates: {maxErrorRate: 2}`, inferenceOpts, []want{
			{"steps[0].inference.spec.backend", `unknown backend "tgi"; use triton or vllm`},
			{"steps[0].inference.spec.model.uri", `"models" is not a URI`},
			{"steps[0].inference.spec.image", "required: the serving image"},
			{"steps[0].inference.spec.env[1].name", `duplicate name "A" (also env[0])`},
			{"steps[0].inference.spec.resources.gpuType", "required with gpus"},
			{"steps[0].inference.spec.replicas.max", "must be at least replicas.min (3)"},
			{"steps[0].inference.spec.rollout.canary.steps[1].weight", "must be greater than the previous step's weight (20)"},
			{"steps[0].inference.spec.rollout.gates.maxErrorRate", "must be a fraction above 0 and at most 1"},
		}},
		{"templated values are checked once rendered; their templates now", `
steps:
  - {name: train, container: {command: [x]}}
  - name: deploy
    kind: inference
    inference:
      endpoint: chat
      cluster: gpu-a
      spec:
        backend: vllm
        model: {uri: "{{ steps.train.outputs.model }}"}
        image: "{{ steps.trian.outputs.image }}"
        resources: {gpuType: "{{ params.gpu }}", gpus: 1}`, inferenceOpts, []want{
			{"steps[1].inference.spec.image", `unknown step "trian" (did you mean "train"?)`},
			{"steps[1].inference.spec.resources.gpuType", `unknown param "gpu"`},
		}},
		{"cluster", `
steps:
  - {name: a, kind: inference, inference: {endpoint: a, spec: {backend: vllm, model: {name: m}, image: i}}}
  - {name: b, kind: inference, inference: {endpoint: b, cluster: GPU, spec: {backend: vllm, model: {name: m}, image: i}}}
  - {name: c, kind: inference, placement: {cluster: gpu-a}, inference: {endpoint: c, cluster: gpu-a, spec: {backend: vllm, model: {name: m}, image: i}}}`,
			inferenceOpts, []want{
				{"steps[0].inference.cluster", "required: the registered cluster the endpoint runs on (the local runtime here does not serve inference endpoints)"},
				{"steps[1].inference.cluster", `invalid cluster name "GPU"`},
				{"steps[2].placement", "an inference step's endpoint runs on inference.cluster, which outlives the run; placement does not apply to it"},
			}},
		{"a local runtime that serves endpoints", `
steps:
  - {name: a, kind: inference, inference: {endpoint: a, spec: {backend: vllm, model: {name: m}, image: i}}}
  - {name: b, kind: inference, inference: {endpoint: b, cluster: gpu-a, spec: {backend: vllm, model: {name: m}, image: i}}}`,
			local, []want{
				{"steps[1].inference.cluster", "no Kubernetes cluster is registered; leave cluster out to serve the endpoint on the local runtime"},
			}},
		{"no runtime that serves endpoints", `
steps:
  - {name: a, kind: inference, inference: {endpoint: a, spec: {backend: vllm, model: {name: m}, image: i}}}
  - {name: b, kind: inference}`, localOpts, []want{
			{"steps[0].kind", `step kind "inference" needs a Kubernetes cluster to run its endpoint; the local runtime here does not serve inference endpoints`},
			{"steps[1].kind", `step kind "inference" needs a Kubernetes cluster`},
		}},
		{"the block is required", `
steps:
  - {name: a, kind: inference}`, inferenceOpts, []want{
			{"steps[0].inference", "required for an inference step"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			checkProblems(t, problemsOf(t, Validate(mustParse(t, tc.spec), tc.opts)), tc.want)
		})
	}
}

// The endpoint spec is parsed as strictly as the rest: durations, typos
// and wrong types are named by their path, all at once.
func TestParseInferenceSpec(t *testing.T) {
	_, err := Parse([]byte(`
steps:
  - name: deploy
    kind: inference
    inference:
      endpoint: chat
      spec:
        backend: vllm
        modle: {name: m}
        replicas: {max: "3"}
        autoscaling: {stableWindow: soon, panicWindow: 5}
        rollout: {canary: {steps: [{weight: 20, pause: 1h}, {weight: 50, pause: later}]}}
`))
	checkProblems(t, problemsOf(t, err), []want{
		{"steps[0].inference.spec.autoscaling.panicWindow", "must be a duration string"},
		{"steps[0].inference.spec.autoscaling.stableWindow", `invalid duration "soon"`},
		{"steps[0].inference.spec.modle", `unknown field "modle" (did you mean "model"?)`},
		{"steps[0].inference.spec.replicas.max", `must be a whole number, got string "3"`},
		{"steps[0].inference.spec.rollout.canary.steps[1].pause", `invalid duration "later"`},
	})
}

// EstimateHistoryEvents counts an inference step's progress signals.
func TestEstimateCountsInferenceProgress(t *testing.T) {
	p := mustParse(t, trainDeploy)
	if got, want := EstimateHistoryEvents(p), 20+eventsPerAttempt+2*eventsPerAttempt; got != want {
		t.Errorf("EstimateHistoryEvents = %d, want %d", got, want)
	}
}

// TestExampleTrainCanaryPipeline keeps examples/pipelines/train-canary.yaml
// valid once a cluster is registered, and checks that its deploy step
// renders into a valid endpoint spec.
func TestExampleTrainCanaryPipeline(t *testing.T) {
	data, err := os.ReadFile("../examples/pipelines/train-canary.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(p, inferenceOpts); err != nil {
		t.Fatal(err)
	}
	checkProblems(t, problemsOf(t, Validate(p, localOpts)), []want{
		{"steps[2].kind", `step kind "inference" needs a Kubernetes cluster`},
	})
	if diff := cmp.Diff([][]int{{}, {0}, {0, 1}, {2}}, Dependencies(p)); diff != "" {
		t.Fatalf("Dependencies (-want +got):\n%s", diff)
	}
	params, err := ResolveParams(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := Env{Params: params, Run: RunEnv{ID: "r1", Project: "demo", Pipeline: "train-canary"}, Steps: map[string]StepEnv{
		"train":    {Outputs: map[string]any{"model": "s3://atelier-demo/runs/r1/model", "accuracy": 0.91}},
		"evaluate": {Outputs: map[string]any{"ok": true}},
	}}
	if ok, err := EvalWhen(p.Steps[2].When, env); err != nil || !ok {
		t.Fatalf("deploy when = %v, %v", ok, err)
	}
	inf, err := RenderInference(p.Steps[2].Inference, env)
	if err != nil {
		t.Fatal(err)
	}
	if err := inference.Validate(inf.Spec); err != nil {
		t.Errorf("rendered spec: %v", err)
	}
	if inf.Spec.Model.URI != "s3://atelier-demo/runs/r1/model" || inf.Spec.Env[0].Value != "r1" {
		t.Errorf("rendered spec = %+v", inf.Spec)
	}
	env.Steps["deploy"] = StepEnv{Outputs: map[string]any{"endpoint": "chat", "revision": 2.0}}
	c, err := RenderContainer(p.Steps[3].Container, env)
	if err != nil || c.Env["REVISION"] != "2" {
		t.Errorf("smoke env = %v, %v", c, err)
	}
}
