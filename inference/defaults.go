package inference

import (
	"slices"
	"time"

	"github.com/atelier-ml/atelier/schema"
)

// Defaults for the zero values of EndpointSpec (applied by WithDefaults).
const (
	DefaultMinReplicas    = 1
	DefaultStableWindow   = 60 * time.Second
	DefaultPanicThreshold = 2.0
	// DefaultScaleDownDelay is longer than Knative's 0: a GPU replica
	// takes minutes to pull and load, so flapping costs far more than a
	// few idle minutes.
	DefaultScaleDownDelay = 5 * time.Minute

	DefaultStrategy              = StrategyRolling
	DefaultMaxErrorRate          = 0.01
	DefaultMinSamples            = 50
	DefaultAnalysisInterval      = 30 * time.Second
	DefaultMaxInsufficient       = 10 * time.Minute
	DefaultOnInsufficient        = InsufficientPause
	DefaultScheduledDeadline     = 10 * time.Minute
	DefaultImagePulledDeadline   = 20 * time.Minute
	DefaultEngineReadyDeadline   = 30 * time.Minute
	minDefaultPanicWindow        = time.Second
	defaultPanicWindowDivisor    = 10 // panic window = stable window / 10, as Knative
	defaultSurge, defaultUnavail = 1, 0
)

// DefaultCanarySteps returns the steps of a canary that names none: 10%
// for 5m, then 50% for 5m. A function, so that no caller can change them.
func DefaultCanarySteps() []CanaryStep {
	return []CanaryStep{
		{Weight: 10, Pause: schema.Duration(5 * time.Minute)},
		{Weight: 50, Pause: schema.Duration(5 * time.Minute)},
	}
}

// WithDefaults returns s with every unset field given its default. It does
// not validate and never changes a field that is set, so Validate still
// sees the user's values. Revisions store the defaulted spec: rolling back
// to a revision restores what it ran even if the defaults change later.
func WithDefaults(s EndpointSpec) EndpointSpec {
	s.Args = slices.Clone(s.Args)
	s.Env = slices.Clone(s.Env)
	if s.Pod != nil && s.Pod.IsZero() {
		s.Pod = nil // `pod: {}` is no pod settings: the same digest
	}

	if s.Replicas.Min == nil {
		m := DefaultMinReplicas
		s.Replicas.Min = &m
	} else {
		m := *s.Replicas.Min // do not alias the caller's int
		s.Replicas.Min = &m
	}
	if s.Replicas.Max == 0 {
		s.Replicas.Max = max(*s.Replicas.Min, 1)
	}

	a := &s.Autoscaling
	if a.TargetQueuePerReplica == 0 {
		a.TargetQueuePerReplica = backendTarget(s.Backend)
	}
	if a.StableWindow == 0 {
		a.StableWindow = schema.Duration(DefaultStableWindow)
	}
	if a.PanicWindow == 0 {
		a.PanicWindow = schema.Duration(max(minDefaultPanicWindow, a.StableWindow.D()/defaultPanicWindowDivisor))
	}
	if a.PanicThreshold == 0 {
		a.PanicThreshold = DefaultPanicThreshold
	}
	delay := schema.Duration(DefaultScaleDownDelay)
	if a.ScaleDownDelay != nil {
		delay = *a.ScaleDownDelay
	}
	a.ScaleDownDelay = &delay // a copy: defaults never alias the caller's spec

	r := &s.Rollout
	if r.Strategy == "" {
		r.Strategy = DefaultStrategy
	}
	surge, unavail := defaultSurge, defaultUnavail
	if r.SurgeFree {
		surge, unavail = 0, 1
	}
	if r.MaxSurge == nil {
		r.MaxSurge = &surge
	} else {
		v := *r.MaxSurge
		r.MaxSurge = &v
	}
	if r.MaxUnavailable == nil {
		r.MaxUnavailable = &unavail
	} else {
		v := *r.MaxUnavailable
		r.MaxUnavailable = &v
	}
	if r.Strategy == StrategyCanary && len(r.Canary.Steps) == 0 {
		r.Canary.Steps = DefaultCanarySteps()
	} else {
		r.Canary.Steps = slices.Clone(r.Canary.Steps)
	}
	g := &r.Gates
	if g.MaxErrorRate == 0 {
		g.MaxErrorRate = DefaultMaxErrorRate
	}
	if g.MinSamples == 0 {
		g.MinSamples = DefaultMinSamples
	}
	if g.AnalysisInterval == 0 {
		g.AnalysisInterval = schema.Duration(DefaultAnalysisInterval)
	}
	if g.MaxInsufficient == 0 {
		g.MaxInsufficient = schema.Duration(DefaultMaxInsufficient)
	}
	if g.OnInsufficient == "" {
		g.OnInsufficient = DefaultOnInsufficient
	}
	d := &r.Startup
	if d.Scheduled == 0 {
		d.Scheduled = schema.Duration(DefaultScheduledDeadline)
	}
	if d.ImagePulled == 0 {
		d.ImagePulled = schema.Duration(DefaultImagePulledDeadline)
	}
	if d.EngineReady == 0 {
		d.EngineReady = schema.Duration(DefaultEngineReadyDeadline)
	}
	return s
}

// backendTarget is the default TargetQueuePerReplica: a starting point,
// to be tuned by measuring the model.
func backendTarget(b Backend) float64 {
	if info, ok := Info(b); ok {
		return info.DefaultTarget
	}
	return 1
}
