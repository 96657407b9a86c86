package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"golang.org/x/sync/semaphore"

	"github.com/atelier-ml/atelier/api/gen"
	"github.com/atelier-ml/atelier/internal/catalog"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
	"github.com/atelier-ml/atelier/runstate"
)

// Catalog is everything the gateway needs from the catalogue. Each embedded
// interface is declared next to the handlers that use it.
type Catalog interface {
	ProjectStore
	TokenStore
	PipelineStore
	GoWorkflowStore
	RunStore
	LogStore
	ItemStore
	ClusterStore
	GPUPolicyStore
	StepCacheStore
	Pinger
}

// Defaults; each can be changed with an Option.
const (
	DefaultBodyLimit    = 1 << 20 // bytes; pipeline specs have their own, lower limit
	DefaultPollInterval = time.Second
	DefaultKeepAlive    = 15 * time.Second
	DefaultQueryTimeout = 2 * time.Second
	defaultLogPage      = 1 << 20 // bytes of log per response or per streamed read
)

type server struct {
	// launchBox and launchBytes serve Kubernetes steps' launchers
	// (launcher.go); manifests caches the input directories they read.
	launchBox   grant.Box
	launchBytes LauncherBytes
	// launchLimit caps each project's artifact bytes against launchUsage
	// for launchers' uploads (0: no cap).
	launchLimit int64
	launchUsage ArtifactUsage
	manifests   manifestCache
	grants      grantCache
	// launchUploads bounds the memory of launchers' uploads through the
	// gateway.
	launchUploads *semaphore.Weighted
	cat           Catalog
	eng           Engine
	log           *zap.Logger
	now           func() time.Time
	newID         func() string
	conv          Converger
	// endpoints serves inference endpoints (nil: their routes answer 503).
	endpoints Endpoints
	schedules Schedules
	proxy     EndpointProxy
	// webhooks serves /webhooks (nil: those routes answer 503).
	webhooks            Webhooks
	triggers            Triggers
	secrets             Secrets
	lineage             ArtifactLineage // nil: artifact routes answer 503
	artifactBytes       ArtifactBytes   // nil: downloads answer 503
	models              ModelRegistry   // nil: model routes answer 503
	aliases             AliasMover      // nil: alias moves answer 503
	webhookAllowPrivate bool

	bodyLimit    int64
	publicURL    string
	pollInterval time.Duration
	keepAlive    time.Duration
	queryTimeout time.Duration
	taskQueue    string
	logPage      int
	registry     *prometheus.Registry
	tracer       trace.Tracer // nil: tracing off

	routes   map[string]route // "METHOD /echo/path" -> what the spec says about it
	specJSON []byte
	metrics  *metrics

	streamLimit int
	hub         *statusHub
	streams     *streamSlots

	tokenTTL time.Duration
	tokens   *tokenCache   // nil: every request looks its token up
	versions *versionCache // immutable pipeline versions
}

// Cache bounds.
const (
	maxCachedTokens   = 10_000
	maxCachedVersions = 1_000
)

// WithTokenCacheTTL keeps resolved tokens for d (default 0: no cache), so
// that requests skip the token's Postgres lookup; a token revoked through
// another gateway or in the database then keeps working here for up to d.
// Revoking through this gateway takes effect here at once; expiry is
// checked on every request.
func WithTokenCacheTTL(d time.Duration) Option { return func(s *server) { s.tokenTTL = d } }

// Option configures New.
type Option func(*server)

// WithLogger sets the logger (default: no logging).
func WithLogger(l *zap.Logger) Option { return func(s *server) { s.log = l } }

// WithClock replaces time.Now for the timestamps the gateway writes (and for
// token expiry), so tests can control time.
func WithClock(now func() time.Time) Option { return func(s *server) { s.now = now } }

// WithBodyLimit caps request bodies (default 1 MiB); larger bodies get 413.
func WithBodyLimit(n int64) Option { return func(s *server) { s.bodyLimit = n } }

// WithPublicURL makes run links absolute (e.g. "https://atelier.example.com").
// The Temporal UI link comes from Engine.UIURL, i.e. from the engine's UI base.
func WithPublicURL(u string) Option {
	return func(s *server) { s.publicURL = strings.TrimRight(u, "/") }
}

// WithPollInterval sets how often event streams and followed logs look for
// changes (default 1s).
func WithPollInterval(d time.Duration) Option { return func(s *server) { s.pollInterval = d } }

// WithKeepAlive sets the interval of SSE keep-alive comments (default 15s).
func WithKeepAlive(d time.Duration) Option { return func(s *server) { s.keepAlive = d } }

// WithQueryTimeout bounds the live status query to Temporal (default 2s);
// when it expires the status mirrored in the catalogue is served.
func WithQueryTimeout(d time.Duration) Option { return func(s *server) { s.queryTimeout = d } }

// WithTaskQueue sets the task queue declarative runs start on (default
// runstate.TaskQueueLocal); it must be the one the local runtime's workers poll.
func WithTaskQueue(q string) Option { return func(s *server) { s.taskQueue = q } }

// WithStreamLimit bounds the event and log-follow streams one token may
// hold open at once (default DefaultStreamsPerToken); more answer 429.
func WithStreamLimit(n int) Option { return func(s *server) { s.streamLimit = n } }

// Converger records the final state of a run whose workflow ended outside
// Atelier (internal/services/reconcile implements it).
type Converger interface {
	Converge(ctx context.Context, run catalog.Run) (runstate.Status, bool, error)
}

// WithConverger lets reads converge a run whose workflow closed without
// mirroring its end (terminated, timed out) at once, instead of waiting
// for the background sweep.
func WithConverger(c Converger) Option { return func(s *server) { s.conv = c } }

// WithRegistry registers the gateway's metrics on reg and serves reg at
// /metrics (default: a private registry with Go and process collectors).
func WithRegistry(reg *prometheus.Registry) Option { return func(s *server) { s.registry = reg } }

// withLogPage sets the log bytes per response or streamed read (tests).
func withLogPage(n int) Option { return func(s *server) { s.logPage = n } }

// New builds the gateway. The caller serves the returned echo instance (with
// no write timeout on the http.Server, or streams get cut).
func New(cat Catalog, eng Engine, opts ...Option) (*echo.Echo, error) {
	if cat == nil || eng == nil {
		return nil, errors.New("api: catalog and engine are required")
	}
	s := &server{
		cat:          cat,
		eng:          eng,
		log:          zap.NewNop(),
		now:          time.Now,
		newID:        func() string { return uuid.Must(uuid.NewV7()).String() },
		taskQueue:    runstate.TaskQueueLocal,
		bodyLimit:    DefaultBodyLimit,
		pollInterval: DefaultPollInterval,
		keepAlive:    DefaultKeepAlive,
		queryTimeout: DefaultQueryTimeout,
		logPage:      defaultLogPage,
		streamLimit:  DefaultStreamsPerToken,
	}
	for _, o := range opts {
		o(s)
	}
	s.launchUploads = semaphore.NewWeighted(launcherUploadBudget)
	s.tokens = newTokenCache(s.tokenTTL, maxCachedTokens)
	s.versions = newVersionCache(maxCachedVersions)
	if s.bodyLimit <= 0 || s.pollInterval <= 0 || s.keepAlive <= 0 || s.queryTimeout <= 0 || s.logPage <= 0 || s.streamLimit <= 0 {
		return nil, errors.New("api: limits and intervals must be positive")
	}

	doc, err := gen.GetSwagger()
	if err != nil {
		return nil, fmt.Errorf("api: load embedded spec: %w", err)
	}
	if s.specJSON, err = doc.MarshalJSON(); err != nil {
		return nil, fmt.Errorf("api: encode spec: %w", err)
	}
	if s.routes, err = routesFromSpec(doc); err != nil {
		return nil, err
	}
	validate, err := s.validator(doc)
	if err != nil {
		return nil, err
	}
	if s.metrics, err = newMetrics(s.registry); err != nil {
		return nil, err
	}
	s.hub = &statusHub{interval: s.pollInterval, fetch: s.refresh, polls: s.metrics.statusPolls, feeds: map[string]*runFeed{}}
	s.streams = &streamSlots{limit: s.streamLimit, open: s.metrics.streamsOpen, n: map[string]int{}}

	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Binder = s // strict JSON decoding of request bodies (binder.go)
	// Order matters: metrics see the final status of everything (including
	// recovered panics); auth runs before the body is read so anonymous
	// clients cannot make the server buffer bodies; validation needs the
	// buffered body.
	e.Use(middleware.RequestID())
	if s.tracer != nil {
		// Outside observe, so the span ends with the status observe rendered.
		e.Use(s.trace)
	}
	e.Use(s.observe)
	e.Use(s.recoverPanics)
	e.Use(s.authenticate)
	e.Use(s.limitBody)
	e.Use(validate)
	gen.RegisterHandlers(e, gen.NewStrictHandler(s, []gen.StrictMiddlewareFunc{withRequest}))
	s.invokeRoutes(e)
	s.launcherRoutes(e)
	if err := s.uiRoutes(e); err != nil {
		return nil, err
	}
	return e, nil
}

var _ gen.StrictServerInterface = (*server)(nil)
