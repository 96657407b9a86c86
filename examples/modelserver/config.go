package modelserver

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"strconv"
	"time"
)

// Backend is the wire dialect the fake speaks.
type Backend string

// The dialects.
const (
	BackendVLLM   Backend = "vllm"
	BackendTriton Backend = "triton"
)

// String implements flag.Value.
func (b *Backend) String() string { return string(*b) }

// Set implements flag.Value.
func (b *Backend) Set(s string) error {
	switch Backend(s) {
	case BackendVLLM, BackendTriton:
		*b = Backend(s)
		return nil
	}
	return fmt.Errorf("%w: backend %q (want vllm or triton)", ErrInvalidConfig, s)
}

// ErrInvalidConfig is wrapped by every validation error of Config and of the
// faults API.
var ErrInvalidConfig = errors.New("modelserver: invalid config")

// Clock is the time source. Tests inject a fake one to flip readiness and
// finish requests without sleeping.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Config says what the fake serves and how badly. The zero value (plus a
// Backend) is a healthy server that is ready at once and answers instantly.
// Every knob from ErrorRate down can be changed at run time through
// POST /admin/faults.
type Config struct {
	// Backend selects the dialect; empty means vllm.
	Backend Backend
	// Model is the served model name (vLLM's --served-model-name, Triton's
	// model repository entry); empty means "fake-model".
	Model string
	// ModelVersion is Triton's model version (the "version" metric label and
	// the versions/{v} routes); empty means "1". vLLM ignores it.
	ModelVersion string
	// WeightsDigest is what the engine loaded (WeightsDigest), sent in
	// the X-Model-Weights header of every response; empty: no header.
	WeightsDigest string
	// Revision identifies the deployment revision: it is sent in the
	// X-Model-Revision header of every response and echoed in inference
	// response bodies, so a test can measure a traffic split. Empty: no
	// header.
	Revision string

	// StartupDelay is how long after New the model counts as loaded
	// (a slow GPU engine start). Until then liveness answers 200 and
	// readiness / inference answer 503.
	StartupDelay time.Duration
	// ServiceTime is how long each inference request holds a running slot.
	ServiceTime time.Duration
	// Concurrency is the number of requests served at once (vLLM's running
	// batch, Triton's instance count); the rest wait in a FIFO. Zero means 4.
	Concurrency int
	// MaxQueue bounds the FIFO: a request arriving when MaxQueue requests
	// already wait is answered 429. Zero means unbounded.
	MaxQueue int
	// ErrorRate is the fraction of inference requests answered 500, in
	// [0, 1]. Failures follow a counter pattern, not chance: the rate is
	// taken as the fraction p/q nearest to it with q <= 10000 (1/3 is 1/3),
	// and request k, counting from 1 since the rate was last set, fails
	// exactly when floor(k*p/q) > floor((k-1)*p/q). So the first n requests
	// hold floor(n*p/q) failures, and any n consecutive ones n*p/q rounded
	// down or up. Requests count when they reach a running slot.
	ErrorRate float64
	// FailAfter, when positive, makes the server crash once it has answered
	// that many inference requests (a crash loop under traffic).
	FailAfter int
	// CrashAfter, when positive, makes the server crash that long after New
	// (a crash loop without traffic).
	CrashAfter time.Duration

	// NoMetricsRoute removes GET /metrics from the handler; serve
	// Server.MetricsHandler on a listener of its own instead (Triton's
	// port 8002).
	NoMetricsRoute bool
	// Clock defaults to the system clock.
	Clock Clock
	// Logger defaults to discarding.
	Logger *slog.Logger
	// OnCrash is called once when an injected crash happens, after the
	// server has started aborting every connection. The command exits the
	// process there; in-process tests may leave it nil and watch
	// Server.Crashed instead.
	OnCrash func(reason string)
}

// Validate reports the first invalid field, wrapping ErrInvalidConfig.
func (c Config) Validate() error {
	switch c.Backend {
	case "", BackendVLLM, BackendTriton:
	default:
		return fmt.Errorf("%w: backend %q (want vllm or triton)", ErrInvalidConfig, c.Backend)
	}
	switch {
	case c.StartupDelay < 0:
		return fmt.Errorf("%w: startup delay %s is negative", ErrInvalidConfig, c.StartupDelay)
	case c.CrashAfter < 0:
		return fmt.Errorf("%w: crash-after %s is negative", ErrInvalidConfig, c.CrashAfter)
	case c.FailAfter < 0:
		return fmt.Errorf("%w: fail-after %d is negative", ErrInvalidConfig, c.FailAfter)
	}
	return validateKnobs(c.ServiceTime, c.Concurrency, c.MaxQueue, c.ErrorRate)
}

func validateKnobs(serviceTime time.Duration, concurrency, maxQueue int, errorRate float64) error {
	switch {
	case serviceTime < 0:
		return fmt.Errorf("%w: service time %s is negative", ErrInvalidConfig, serviceTime)
	case concurrency < 0:
		return fmt.Errorf("%w: concurrency %d is negative", ErrInvalidConfig, concurrency)
	case maxQueue < 0:
		return fmt.Errorf("%w: max queue %d is negative", ErrInvalidConfig, maxQueue)
	case !(errorRate >= 0 && errorRate <= 1): // also rejects NaN
		return fmt.Errorf("%w: error rate %v is outside [0, 1]", ErrInvalidConfig, errorRate)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Backend == "" {
		c.Backend = BackendVLLM
	}
	if c.Model == "" {
		c.Model = "fake-model"
	}
	if c.ModelVersion == "" {
		c.ModelVersion = "1"
	}
	if c.Concurrency == 0 {
		c.Concurrency = 4
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Environment variables read by ApplyEnv, each the twin of a flag of
// RegisterFlags.
const (
	EnvBackend      = "ATELIER_FAKE_BACKEND"
	EnvModel        = "ATELIER_FAKE_MODEL"
	EnvModelVersion = "ATELIER_FAKE_MODEL_VERSION"
	EnvRevision     = "ATELIER_FAKE_REVISION"
	EnvStartupDelay = "ATELIER_FAKE_STARTUP_DELAY"
	EnvServiceTime  = "ATELIER_FAKE_SERVICE_TIME"
	EnvConcurrency  = "ATELIER_FAKE_CONCURRENCY"
	EnvMaxQueue     = "ATELIER_FAKE_MAX_QUEUE"
	EnvErrorRate    = "ATELIER_FAKE_ERROR_RATE"
	EnvFailAfter    = "ATELIER_FAKE_FAIL_AFTER"
	EnvCrashAfter   = "ATELIER_FAKE_CRASH_AFTER"
)

// ApplyEnv overwrites the fields whose ATELIER_FAKE_* variable is set
// (lookup is os.LookupEnv in the command). Call it before RegisterFlags so
// that flags override the environment.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) error {
	str := func(name string, dst *string) {
		if v, ok := lookup(name); ok {
			*dst = v
		}
	}
	dur := func(name string, dst *time.Duration) error {
		v, ok := lookup(name)
		if !ok {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%w: %s=%q: want a duration such as 250ms", ErrInvalidConfig, name, v)
		}
		*dst = d
		return nil
	}
	integer := func(name string, dst *int) error {
		v, ok := lookup(name)
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%w: %s=%q: want an integer", ErrInvalidConfig, name, v)
		}
		*dst = n
		return nil
	}
	if v, ok := lookup(EnvBackend); ok {
		if err := c.Backend.Set(v); err != nil {
			return fmt.Errorf("%s: %w", EnvBackend, err)
		}
	}
	str(EnvModel, &c.Model)
	str(EnvModelVersion, &c.ModelVersion)
	str(EnvRevision, &c.Revision)
	if v, ok := lookup(EnvErrorRate); ok {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%w: %s=%q: want a number in [0, 1]", ErrInvalidConfig, EnvErrorRate, v)
		}
		c.ErrorRate = f
	}
	return errors.Join(
		dur(EnvStartupDelay, &c.StartupDelay),
		dur(EnvServiceTime, &c.ServiceTime),
		dur(EnvCrashAfter, &c.CrashAfter),
		integer(EnvConcurrency, &c.Concurrency),
		integer(EnvMaxQueue, &c.MaxQueue),
		integer(EnvFailAfter, &c.FailAfter),
	)
}

// RegisterFlags binds the behaviour flags to c, with c's current values as
// defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	if c.Backend == "" {
		c.Backend = BackendVLLM
	}
	fs.Var(&c.Backend, "backend", "dialect: vllm or triton ("+EnvBackend+")")
	fs.StringVar(&c.Model, "model", c.Model, "served model name, empty for fake-model ("+EnvModel+")")
	fs.StringVar(&c.ModelVersion, "model-version", c.ModelVersion, "Triton model version, empty for 1 ("+EnvModelVersion+")")
	fs.StringVar(&c.Revision, "revision", c.Revision, "revision sent in X-Model-Revision and response bodies ("+EnvRevision+")")
	fs.DurationVar(&c.StartupDelay, "startup-delay", c.StartupDelay, "time before the model counts as loaded ("+EnvStartupDelay+")")
	fs.DurationVar(&c.ServiceTime, "service-time", c.ServiceTime, "time each inference request runs ("+EnvServiceTime+")")
	fs.IntVar(&c.Concurrency, "concurrency", c.Concurrency, "requests running at once, 0 for 4; the rest queue ("+EnvConcurrency+")")
	fs.IntVar(&c.MaxQueue, "max-queue", c.MaxQueue, "queued requests before 429, 0 for unbounded ("+EnvMaxQueue+")")
	fs.Float64Var(&c.ErrorRate, "error-rate", c.ErrorRate, "fraction of inference requests answered 500 ("+EnvErrorRate+")")
	fs.IntVar(&c.FailAfter, "fail-after", c.FailAfter, "crash after answering this many inference requests, 0 never ("+EnvFailAfter+")")
	fs.DurationVar(&c.CrashAfter, "crash-after", c.CrashAfter, "crash this long after start, 0 never ("+EnvCrashAfter+")")
}
