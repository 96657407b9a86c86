package inference

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

// ErrInvalidSpec is matched (errors.Is) by every *ValidationError.
var ErrInvalidSpec = errors.New("inference: invalid endpoint spec")

// Bounds on a spec: generous, but small enough that the arithmetic of the
// autoscaler and the rollouts cannot overflow and a typo is caught.
const (
	MaxReplicas         = 1000
	MaxGPUsPerReplica   = 16
	MaxCanarySteps      = 20
	MaxMinSamples       = 1_000_000
	MaxTargetPerReplica = 1_000_000
)

var (
	envNameRE  = regexp.MustCompile(`^[-._a-zA-Z][-._a-zA-Z0-9]*$`)
	quantityRE = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$`)
)

type problems []schema.Problem

func (ps *problems) add(path, format string, args ...any) {
	*ps = append(*ps, schema.Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

func at(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// Validate returns a *ValidationError listing every problem of the spec
// (nil when it is valid). It checks the spec with defaults applied, so a
// default never hides a conflict it creates with a value the user set;
// problems are still reported at the user's paths.
func Validate(spec EndpointSpec) error {
	s := WithDefaults(spec)
	var ps problems
	info, known := Info(s.Backend)
	switch {
	case s.Backend == "":
		ps.add("backend", "required: triton or vllm")
	case !known:
		ps.add("backend", "unknown backend %q; use triton or vllm", s.Backend)
	}
	validateModel(s, &ps)
	switch {
	case s.Image == "":
		ps.add("image", "required: the serving image, e.g. nvcr.io/nvidia/tritonserver:25.04-py3 or vllm/vllm-openai:v0.9.1")
	case strings.ContainsAny(s.Image, " \t\n"):
		ps.add("image", "must not contain whitespace")
	}
	if known {
		for i, a := range s.Args {
			if f := reservedFlag(info, a); f != "" {
				hint := "Atelier sets it (or relies on its default) for readiness probes, the Service and metrics; remove it"
				if f == "--model" || f == "--served-model-name" {
					hint = "set model.uri and model.name instead"
				}
				ps.add(at("args", i), "%s is reserved: %s", f, hint)
			}
		}
	}
	seen := map[string]int{}
	for i, e := range s.Env {
		p := at("env", i) + ".name"
		switch {
		case e.Name == "":
			ps.add(p, "required")
		case !envNameRE.MatchString(e.Name):
			ps.add(p, "invalid name %q: use letters, digits, '_', '-' and '.', not starting with a digit", e.Name)
		}
		if j, dup := seen[e.Name]; dup && e.Name != "" {
			ps.add(p, "duplicate name %q (also env[%d])", e.Name, j)
		} else {
			seen[e.Name] = i
		}
	}
	for i, sec := range s.Secrets {
		p := at("secrets", i)
		if !schema.ValidSecretName(sec.Name) {
			ps.add(p+".name", "%q is not a secret name: lowercase letters, digits, '.', '_' and '-', at most 63", sec.Name)
		}
		switch {
		case sec.Env == "":
			ps.add(p+".env", "required: the variable the replicas read the secret from")
		case !envNameRE.MatchString(sec.Env):
			ps.add(p+".env", "invalid name %q: use letters, digits, '_', '-' and '.', not starting with a digit", sec.Env)
		case strings.HasPrefix(sec.Env, "ATELIER_"):
			ps.add(p+".env", "%q is reserved: Atelier sets ATELIER_* variables itself", sec.Env)
		}
		if j, dup := seen[sec.Env]; dup && sec.Env != "" {
			ps.add(p+".env", "%q is also set by env[%d] or an earlier secret", sec.Env, j)
		} else {
			seen[sec.Env] = i
		}
	}
	ps = append(ps, schema.ValidatePod("pod", s.Pod)...)
	validateResources(s.Resources, &ps)
	validateReplicas(s, &ps)
	validateAutoscaling(s.Autoscaling, &ps)
	validateRollout(s.Rollout, &ps)
	if len(ps) == 0 {
		return nil
	}
	return &schema.ValidationError{Subject: "endpoint", Problems: ps, Kind: ErrInvalidSpec}
}

func validateModel(s EndpointSpec, ps *problems) {
	m := s.Model
	if m.URI != "" && !strings.Contains(m.URI, "://") && !strings.HasPrefix(m.URI, "/") {
		ps.add("model.uri", "%q is not a URI: use a form such as s3://bucket/models, gs://bucket/models, pvc://claim/path or an absolute path", m.URI)
	}
	if strings.ContainsAny(m.Name, " \t\n") {
		ps.add("model.name", "must not contain whitespace")
	}
	switch {
	case m.Ref != "":
		validateModelRef(m, ps)
	case m.Follow:
		ps.add("model.follow", "follow needs model.ref to name an alias (<model>@<alias>)")
	case m.Registered != nil:
		ps.add("model.registered", "is set by Atelier when it resolves model.ref; leave it out")
	}
	switch s.Backend {
	case BackendTriton:
		if m.URI == "" && m.Ref == "" {
			ps.add("model.uri", "required for triton: the model repository, e.g. s3://bucket/triton-models")
		}
		if m.Name == "" {
			ps.add("model.name", "required for triton: the model to load from the repository")
		}
	case BackendVLLM:
		if m.URI == "" && m.Name == "" && m.Ref == "" {
			ps.add("model", "set model.ref (a registered model, <model>@<alias>), model.name (a Hugging Face ID such as meta-llama/Llama-3.1-8B-Instruct) or model.uri (a path to the weights)")
		}
	}
}

// validateModelRef checks a registry reference; whether it names a version
// is for the registry to say (catalog.ResolveModel, at the gateway).
func validateModelRef(m Model, ps *problems) {
	r, err := schema.ParseModelRef(m.Ref)
	switch {
	case err != nil:
		ps.add("model.ref", "%s", err)
	case m.URI != "":
		ps.add("model.uri", "set model.uri or model.ref, not both: the registered version's bytes are what the engine loads")
	case m.Follow && r.Alias() == "":
		ps.add("model.follow", "follow needs model.ref to name an alias (<model>@<alias>), not %q", m.Ref)
	}
	if reg := m.Registered; reg != nil && err == nil && reg.Model != r.Model {
		ps.add("model.registered", "names model %s, not the %s of model.ref: it is set by Atelier when it resolves model.ref; leave it out", reg.Model, r.Model)
	}
}

func validateResources(r Resources, ps *problems) {
	switch {
	case r.GPUs < 0 || r.GPUs > MaxGPUsPerReplica:
		ps.add("resources.gpus", "must be between 0 and %d GPUs per replica", MaxGPUsPerReplica)
	case r.GPUs > 0 && r.GPUType == "":
		ps.add("resources.gpuType", "required with gpus: the GPU product (node label nvidia.com/gpu.product, e.g. NVIDIA-A100-SXM4-80GB) or MIG profile; quotas count GPUs per type")
	case r.GPUs == 0 && r.GPUType != "":
		ps.add("resources.gpus", "set the number of %s per replica, or remove gpuType", r.GPUType)
	}
	if len(r.GPUType) > 253 {
		ps.add("resources.gpuType", "at most 253 characters")
	}
	if r.CPU != "" && !quantityRE.MatchString(r.CPU) {
		ps.add("resources.cpu", "invalid quantity %q: use Kubernetes syntax such as \"500m\" or \"8\"", r.CPU)
	}
	if r.Memory != "" {
		if !quantityRE.MatchString(r.Memory) {
			ps.add("resources.memory", "invalid quantity %q: use Kubernetes syntax such as \"64Gi\"", r.Memory)
		} else if strings.HasSuffix(r.Memory, "m") {
			ps.add("resources.memory", "%q means thousandths of a byte; use Mi or Gi, e.g. \"64Gi\"", r.Memory)
		}
	}
}

func validateReplicas(s EndpointSpec, ps *problems) {
	minR, maxR := s.Replicas.MinReplicas(), s.Replicas.Max
	switch {
	case minR < 0 || minR > MaxReplicas:
		ps.add("replicas.min", "must be between 0 and %d", MaxReplicas)
	case minR == 0 && s.Autoscaling.IdleTimeout <= 0:
		ps.add("replicas.min", "0 means scale to zero, which needs autoscaling.idleTimeout (e.g. \"15m\"); set it, or set min to at least 1")
	}
	switch {
	case maxR < 1 || maxR > MaxReplicas:
		ps.add("replicas.max", "must be between 1 and %d", MaxReplicas)
	case maxR < minR:
		ps.add("replicas.max", "must be at least replicas.min (%d)", minR)
	}
}

func validateAutoscaling(a Autoscaling, ps *problems) {
	// Float checks are written !(in range) so that NaN fails them too.
	if t := a.TargetQueuePerReplica; !(t > 0 && t <= MaxTargetPerReplica) {
		ps.add("autoscaling.targetQueuePerReplica", "must be a number of requests above 0 and at most %d", MaxTargetPerReplica)
	}
	between(ps, "autoscaling.stableWindow", a.StableWindow, 6*time.Second, time.Hour)
	if between(ps, "autoscaling.panicWindow", a.PanicWindow, time.Second, time.Hour) && a.PanicWindow > a.StableWindow {
		ps.add("autoscaling.panicWindow", "must not exceed stableWindow (%s)", a.StableWindow.D())
	}
	if t := a.PanicThreshold; !(t > 1 && t <= 10) {
		ps.add("autoscaling.panicThreshold", "must be a ratio above 1 and at most 10 (2 = panic when the short window asks for twice the ready replicas)")
	}
	if a.ScaleDownDelay != nil {
		between(ps, "autoscaling.scaleDownDelay", *a.ScaleDownDelay, 0, time.Hour)
	}
	if a.IdleTimeout != 0 {
		between(ps, "autoscaling.idleTimeout", a.IdleTimeout, 30*time.Second, 7*24*time.Hour)
	}
}

func validateRollout(r RolloutSettings, ps *problems) {
	switch r.Strategy {
	case StrategyRolling, StrategyCanary, StrategyBlueGreen:
	default:
		ps.add("rollout.strategy", "unknown strategy %q; use rolling, canary or blueGreen", r.Strategy)
	}
	surge, unavail := *r.MaxSurge, *r.MaxUnavailable
	if surge < 0 || surge > MaxReplicas {
		ps.add("rollout.maxSurge", "must be between 0 and %d replicas", MaxReplicas)
	}
	if unavail < 0 || unavail > MaxReplicas {
		ps.add("rollout.maxUnavailable", "must be between 0 and %d replicas", MaxReplicas)
	}
	switch {
	case r.SurgeFree && surge > 0:
		ps.add("rollout.maxSurge", "surgeFree never adds replicas above the target: remove maxSurge or set it to 0")
	case r.SurgeFree && unavail == 0:
		ps.add("rollout.maxUnavailable", "surgeFree replaces replicas in place, which needs maxUnavailable of at least 1")
	case surge == 0 && unavail == 0:
		ps.add("rollout.maxSurge", "maxSurge and maxUnavailable cannot both be 0 (no replica could ever be replaced): set maxSurge to 1, or maxUnavailable to 1 if there is no GPU headroom")
	}
	if r.SurgeFree && r.Strategy == StrategyBlueGreen {
		ps.add("rollout.surgeFree", "blueGreen runs a full preview beside the stable revision, which needs headroom; use strategy rolling or canary with surgeFree")
	}
	steps := r.Canary.Steps
	if len(steps) > 0 && r.Strategy != StrategyCanary {
		ps.add("rollout.canary.steps", "only canary rollouts have steps: set strategy to canary or remove them")
	}
	if len(steps) > MaxCanarySteps {
		ps.add("rollout.canary.steps", "%d steps; at most %d", len(steps), MaxCanarySteps)
	}
	prev := 0
	for i, st := range steps {
		p := at("rollout.canary.steps", i)
		switch {
		case st.Weight < 1 || st.Weight > 100:
			ps.add(p+".weight", "must be a percentage between 1 and 100")
		case st.Weight <= prev:
			ps.add(p+".weight", "must be greater than the previous step's weight (%d): traffic only moves forward", prev)
		}
		if st.Weight >= 1 && st.Weight <= 100 {
			prev = max(prev, st.Weight)
		}
		between(ps, p+".pause", st.Pause, 0, 24*time.Hour)
	}
	if r.BlueGreen.AutoPromoteAfter != 0 {
		if r.Strategy != StrategyBlueGreen {
			ps.add("rollout.blueGreen.autoPromoteAfter", "only blueGreen rollouts have a preview: set strategy to blueGreen or remove it")
		}
		between(ps, "rollout.blueGreen.autoPromoteAfter", r.BlueGreen.AutoPromoteAfter, 0, 7*24*time.Hour)
	}
	g := r.Gates
	if e := g.MaxErrorRate; !(e > 0 && e <= 1) {
		ps.add("rollout.gates.maxErrorRate", "must be a fraction above 0 and at most 1 (0.01 = 1%%; 1 disables the gate)")
	}
	if l := g.MaxP99LatencyMs; !(l >= 0 && l <= 3_600_000) {
		ps.add("rollout.gates.maxP99LatencyMs", "must be between 0 (no latency gate) and 3600000 ms")
	}
	if g.MinSamples < 1 || g.MinSamples > MaxMinSamples {
		ps.add("rollout.gates.minSamples", "must be between 1 and %d requests", MaxMinSamples)
	}
	between(ps, "rollout.gates.analysisInterval", g.AnalysisInterval, time.Second, time.Hour)
	if between(ps, "rollout.gates.maxInsufficient", g.MaxInsufficient, 0, 7*24*time.Hour) && g.MaxInsufficient < g.AnalysisInterval {
		ps.add("rollout.gates.maxInsufficient", "must be at least analysisInterval (%s)", g.AnalysisInterval.D())
	}
	switch g.OnInsufficient {
	case InsufficientPause, InsufficientFail:
	default:
		ps.add("rollout.gates.onInsufficient", "unknown value %q; use pause or fail", g.OnInsufficient)
	}
	between(ps, "rollout.startupDeadlines.scheduled", r.Startup.Scheduled, time.Second, 24*time.Hour)
	between(ps, "rollout.startupDeadlines.imagePulled", r.Startup.ImagePulled, time.Second, 24*time.Hour)
	between(ps, "rollout.startupDeadlines.engineReady", r.Startup.EngineReady, time.Second, 24*time.Hour)
}

// between reports whether d lies in [lo, hi], adding a problem if not.
func between(ps *problems, path string, d schema.Duration, lo, hi time.Duration) bool {
	switch {
	case d < 0:
		ps.add(path, "must not be negative")
	case d.D() < lo || d.D() > hi:
		ps.add(path, "must be between %s and %s, got %s", fmtDur(lo), fmtDur(hi), d.D())
	default:
		return true
	}
	return false
}

// fmtDur prints round durations the way users write them ("1h", not "1h0m0s").
func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// nameRE is what an endpoint name must match: a DNS label short enough
// for the Kubernetes names derived from it (the REST API's EndpointName
// has the same pattern).
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,40}$`)

// CheckName returns an error saying how to fix name when it cannot name an
// endpoint, nil when it can.
func CheckName(name string) error {
	if name == "" {
		return errors.New("required: the endpoint's name")
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("invalid endpoint name %q: use lowercase letters, digits and '-', starting with a letter, at most 41 characters", name)
	}
	return nil
}

// CheckLocal lists what a spec may not hold on the local runtime, where
// replicas are processes, not pods: its pod settings would be silently
// ignored. Paths are the spec's ("pod").
func CheckLocal(spec EndpointSpec) []schema.Problem {
	if spec.Pod == nil {
		return nil
	}
	return []schema.Problem{{Path: "pod", Message: "pod settings apply to endpoints on a Kubernetes cluster (cluster); this endpoint runs on the local runtime"}}
}
