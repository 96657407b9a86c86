package inference

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/atelier-ml/atelier/schema"
)

func TestValidateAcceptsMinimalSpecs(t *testing.T) {
	for name, s := range map[string]EndpointSpec{"vllm": vllmSpec(), "triton": tritonSpec()} {
		t.Run(name, func(t *testing.T) {
			if err := Validate(s); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*EndpointSpec)
		want   []schema.Problem
	}{{
		name:   "backend and image",
		mutate: func(s *EndpointSpec) { s.Backend = "tgi"; s.Image = "" },
		want: []schema.Problem{
			{Path: "backend", Message: `unknown backend "tgi"; use triton or vllm`},
			{Path: "image", Message: "required: the serving image, e.g. nvcr.io/nvidia/tritonserver:25.04-py3 or vllm/vllm-openai:v0.9.1"},
		},
	}, {
		name:   "triton needs repository and model name",
		mutate: func(s *EndpointSpec) { *s = tritonSpec(); s.Model = Model{URI: "models"} },
		want: []schema.Problem{
			{Path: "model.uri", Message: `"models" is not a URI: use a form such as s3://bucket/models, gs://bucket/models, pvc://claim/path or an absolute path`},
			{Path: "model.name", Message: "required for triton: the model to load from the repository"},
		},
	}, {
		name:   "vllm needs a model",
		mutate: func(s *EndpointSpec) { s.Model = Model{} },
		want:   []schema.Problem{{Path: "model", Message: "set model.ref (a registered model, <model>@<alias>), model.name (a Hugging Face ID such as meta-llama/Llama-3.1-8B-Instruct) or model.uri (a path to the weights)"}},
	}, {
		name:   "a registry reference is checked",
		mutate: func(s *EndpointSpec) { s.Model = Model{Ref: "Sentiment@", URI: "s3://b/m"} },
		want:   []schema.Problem{{Path: "model.ref", Message: `"Sentiment@" is not <model>, <model>@<alias> or <model>@<version>`}},
	}, {
		name:   "ref and uri exclude each other",
		mutate: func(s *EndpointSpec) { s.Model = Model{Ref: "sentiment", URI: "s3://b/m"} },
		want:   []schema.Problem{{Path: "model.uri", Message: "set model.uri or model.ref, not both: the registered version's bytes are what the engine loads"}},
	}, {
		name:   "follow needs an alias",
		mutate: func(s *EndpointSpec) { s.Model = Model{Ref: "sentiment@3", Follow: true} },
		want:   []schema.Problem{{Path: "model.follow", Message: `follow needs model.ref to name an alias (<model>@<alias>), not "sentiment@3"`}},
	}, {
		name:   "follow needs a ref",
		mutate: func(s *EndpointSpec) { s.Model = Model{Name: "m", Follow: true} },
		want:   []schema.Problem{{Path: "model.follow", Message: "follow needs model.ref to name an alias (<model>@<alias>)"}},
	}, {
		name: "registered names the ref's model",
		mutate: func(s *EndpointSpec) {
			s.Model = Model{Ref: "sentiment@champion", Registered: &RegisteredModel{Model: "other", Version: 1}}
		},
		want: []schema.Problem{{Path: "model.registered", Message: "names model other, not the sentiment of model.ref: it is set by Atelier when it resolves model.ref; leave it out"}},
	}, {
		name: "secrets",
		mutate: func(s *EndpointSpec) {
			s.Env = []EnvVar{{Name: "HF_TOKEN", Value: "x"}}
			s.Secrets = []SecretEnv{{Name: "Bad", Env: "HF_TOKEN"}, {Name: "ok"}, {Name: "ok", Env: "ATELIER_X"}}
		},
		want: []schema.Problem{
			{Path: "secrets[0].name", Message: `"Bad" is not a secret name: lowercase letters, digits, '.', '_' and '-', at most 63`},
			{Path: "secrets[0].env", Message: `"HF_TOKEN" is also set by env[0] or an earlier secret`},
			{Path: "secrets[1].env", Message: "required: the variable the replicas read the secret from"},
			{Path: "secrets[2].env", Message: `"ATELIER_X" is reserved: Atelier sets ATELIER_* variables itself`},
		},
	}, {
		name:   "registered without a ref",
		mutate: func(s *EndpointSpec) { s.Model.Registered = &RegisteredModel{Model: "m", Version: 1} },
		want:   []schema.Problem{{Path: "model.registered", Message: "is set by Atelier when it resolves model.ref; leave it out"}},
	}, {
		name:   "triton serves a registered repository by name",
		mutate: func(s *EndpointSpec) { s.Backend, s.Model = BackendTriton, Model{Ref: "detector@champion"} },
		want:   []schema.Problem{{Path: "model.name", Message: "required for triton: the model to load from the repository"}},
	}, {
		name: "reserved args and env names",
		mutate: func(s *EndpointSpec) {
			s.Args = []string{"--max-model-len=8192", "--port=9000", "--model", "x"}
			s.Env = []EnvVar{{Name: "HF_TOKEN"}, {Name: "1BAD"}, {Name: "HF_TOKEN"}}
		},
		want: []schema.Problem{
			{Path: "args[1]", Message: "--port is reserved: Atelier sets it (or relies on its default) for readiness probes, the Service and metrics; remove it"},
			{Path: "args[2]", Message: "--model is reserved: set model.uri and model.name instead"},
			{Path: "env[1].name", Message: `invalid name "1BAD": use letters, digits, '_', '-' and '.', not starting with a digit`},
			{Path: "env[2].name", Message: `duplicate name "HF_TOKEN" (also env[0])`},
		},
	}, {
		name: "resources",
		mutate: func(s *EndpointSpec) {
			s.Resources = Resources{GPUs: 2, CPU: "two", Memory: "512m"}
		},
		want: []schema.Problem{
			{Path: "resources.gpuType", Message: "required with gpus: the GPU product (node label nvidia.com/gpu.product, e.g. NVIDIA-A100-SXM4-80GB) or MIG profile; quotas count GPUs per type"},
			{Path: "resources.cpu", Message: `invalid quantity "two": use Kubernetes syntax such as "500m" or "8"`},
			{Path: "resources.memory", Message: `"512m" means thousandths of a byte; use Mi or Gi, e.g. "64Gi"`},
		},
	}, {
		name:   "scale to zero needs an idle timeout",
		mutate: func(s *EndpointSpec) { s.Replicas = ReplicaRange{Min: ptr(0), Max: 2} },
		want:   []schema.Problem{{Path: "replicas.min", Message: `0 means scale to zero, which needs autoscaling.idleTimeout (e.g. "15m"); set it, or set min to at least 1`}},
	}, {
		name:   "max below min",
		mutate: func(s *EndpointSpec) { s.Replicas = ReplicaRange{Min: ptr(3), Max: 2} },
		want:   []schema.Problem{{Path: "replicas.max", Message: "must be at least replicas.min (3)"}},
	}, {
		name: "autoscaling ranges",
		mutate: func(s *EndpointSpec) {
			s.Autoscaling = Autoscaling{TargetQueuePerReplica: math.NaN(), StableWindow: schema.Duration(10 * time.Second),
				PanicWindow: schema.Duration(20 * time.Second), PanicThreshold: 0.5, ScaleDownDelay: schema.DurationPtr(-time.Second), IdleTimeout: schema.Duration(time.Second)}
		},
		want: []schema.Problem{
			{Path: "autoscaling.targetQueuePerReplica", Message: "must be a number of requests above 0 and at most 1000000"},
			{Path: "autoscaling.panicWindow", Message: "must not exceed stableWindow (10s)"},
			{Path: "autoscaling.panicThreshold", Message: "must be a ratio above 1 and at most 10 (2 = panic when the short window asks for twice the ready replicas)"},
			{Path: "autoscaling.scaleDownDelay", Message: "must not be negative"},
			{Path: "autoscaling.idleTimeout", Message: "must be between 30s and 168h, got 1s"},
		},
	}, {
		name: "canary steps",
		mutate: func(s *EndpointSpec) {
			s.Rollout = RolloutSettings{Strategy: StrategyCanary, Canary: CanarySettings{Steps: []CanaryStep{
				{Weight: 20}, {Weight: 20, Pause: schema.Duration(time.Minute)}, {Weight: 120}, {Weight: 50, Pause: schema.Duration(-1)},
			}}}
		},
		want: []schema.Problem{
			{Path: "rollout.canary.steps[1].weight", Message: "must be greater than the previous step's weight (20): traffic only moves forward"},
			{Path: "rollout.canary.steps[2].weight", Message: "must be a percentage between 1 and 100"},
			{Path: "rollout.canary.steps[3].pause", Message: "must not be negative"},
		},
	}, {
		name: "surge settings",
		mutate: func(s *EndpointSpec) {
			s.Rollout = RolloutSettings{Strategy: StrategyBlueGreen, SurgeFree: true, MaxSurge: ptr(2),
				Canary: CanarySettings{Steps: []CanaryStep{{Weight: 10}}}}
		},
		want: []schema.Problem{
			{Path: "rollout.maxSurge", Message: "surgeFree never adds replicas above the target: remove maxSurge or set it to 0"},
			{Path: "rollout.surgeFree", Message: "blueGreen runs a full preview beside the stable revision, which needs headroom; use strategy rolling or canary with surgeFree"},
			{Path: "rollout.canary.steps", Message: "only canary rollouts have steps: set strategy to canary or remove them"},
		},
	}, {
		name:   "no surge and no unavailability",
		mutate: func(s *EndpointSpec) { s.Rollout = RolloutSettings{MaxSurge: ptr(0), MaxUnavailable: ptr(0)} },
		want:   []schema.Problem{{Path: "rollout.maxSurge", Message: "maxSurge and maxUnavailable cannot both be 0 (no replica could ever be replaced): set maxSurge to 1, or maxUnavailable to 1 if there is no GPU headroom"}},
	}, {
		name: "gates and deadlines",
		mutate: func(s *EndpointSpec) {
			s.Rollout = RolloutSettings{Strategy: "shadow", Gates: GateSettings{MaxErrorRate: 2, MinSamples: -1,
				AnalysisInterval: schema.Duration(time.Minute), MaxInsufficient: schema.Duration(time.Second), OnInsufficient: "ignore"},
				Startup: StartupDeadlines{EngineReady: schema.Duration(48 * time.Hour)}}
		},
		want: []schema.Problem{
			{Path: "rollout.strategy", Message: `unknown strategy "shadow"; use rolling, canary or blueGreen`},
			{Path: "rollout.gates.maxErrorRate", Message: "must be a fraction above 0 and at most 1 (0.01 = 1%; 1 disables the gate)"},
			{Path: "rollout.gates.minSamples", Message: "must be between 1 and 1000000 requests"},
			{Path: "rollout.gates.maxInsufficient", Message: "must be at least analysisInterval (1m0s)"},
			{Path: "rollout.gates.onInsufficient", Message: `unknown value "ignore"; use pause or fail`},
			{Path: "rollout.startupDeadlines.engineReady", Message: "must be between 1s and 24h, got 48h0m0s"},
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := vllmSpec()
			tt.mutate(&s)
			err := Validate(s)
			if !errors.Is(err, ErrInvalidSpec) {
				t.Fatalf("Validate = %v, want an ErrInvalidSpec", err)
			}
			var ve *schema.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate = %T, want *schema.ValidationError", err)
			}
			if diff := cmp.Diff(tt.want, ve.Problems); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWithDefaults(t *testing.T) {
	s := WithDefaults(EndpointSpec{Backend: BackendVLLM, Rollout: RolloutSettings{Strategy: StrategyCanary, SurgeFree: true}})
	if got := s.Replicas.MinReplicas(); got != 1 || s.Replicas.Max != 1 {
		t.Errorf("replicas = %d..%d, want 1..1", got, s.Replicas.Max)
	}
	a := s.Autoscaling
	if a.TargetQueuePerReplica != 32 || a.StableWindow.D() != time.Minute || a.PanicWindow.D() != 6*time.Second ||
		a.PanicThreshold != 2 || a.ScaleDownDelay.D() != 5*time.Minute || a.IdleTimeout != 0 {
		t.Errorf("autoscaling defaults = %+v", a)
	}
	r := s.Rollout
	if *r.MaxSurge != 0 || *r.MaxUnavailable != 1 {
		t.Errorf("surgeFree surge/unavailable = %d/%d, want 0/1", *r.MaxSurge, *r.MaxUnavailable)
	}
	if diff := cmp.Diff(DefaultCanarySteps(), r.Canary.Steps); diff != "" {
		t.Errorf("canary steps (-want +got):\n%s", diff)
	}
	// The result never aliases the caller's values.
	in := EndpointSpec{Rollout: RolloutSettings{Strategy: StrategyCanary, Canary: CanarySettings{Steps: []CanaryStep{{Weight: 5}}}}}
	WithDefaults(in).Rollout.Canary.Steps[0].Weight = 99
	if in.Rollout.Canary.Steps[0].Weight != 5 {
		t.Fatal("WithDefaults aliases the canary steps")
	}
	// Set fields are kept.
	in = vllmSpec()
	in.Autoscaling.StableWindow = schema.Duration(2 * time.Minute)
	in.Rollout.MaxSurge = ptr(0)
	in.Rollout.MaxUnavailable = ptr(2)
	out := WithDefaults(in)
	if out.Autoscaling.StableWindow.D() != 2*time.Minute || out.Autoscaling.PanicWindow.D() != 12*time.Second {
		t.Errorf("windows = %s/%s, want 2m/12s", out.Autoscaling.StableWindow.D(), out.Autoscaling.PanicWindow.D())
	}
	if *out.Rollout.MaxSurge != 0 || *out.Rollout.MaxUnavailable != 2 || out.Replicas.Max != 4 {
		t.Errorf("set fields changed: %+v %+v", out.Rollout, out.Replicas)
	}
	if !reflect.DeepEqual(WithDefaults(out).Autoscaling, out.Autoscaling) {
		t.Error("WithDefaults is not idempotent")
	}
}

// "0s" turns the scale-down delay off; only an absent field takes the
// default (found by bench/coldstart, which never scaled to zero twice).
func TestScaleDownDelayZeroIsNotDefault(t *testing.T) {
	for _, tc := range []struct {
		json string
		want time.Duration
	}{
		{`{}`, DefaultScaleDownDelay},
		{`{"scaleDownDelay":"0s"}`, 0},
		{`{"scaleDownDelay":"30s"}`, 30 * time.Second},
	} {
		s := vllmSpec()
		s.Autoscaling = Autoscaling{}
		if err := json.Unmarshal([]byte(tc.json), &s.Autoscaling); err != nil {
			t.Fatal(err)
		}
		if got := AutoscalerConfigFor(s).ScaleDownDelay; got != tc.want {
			t.Errorf("%s: delay = %s, want %s", tc.json, got, tc.want)
		}
	}
}
