package serving

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/internal/platform/launch/grant"
)

// DefaultNamespaceTemplate is where a project's endpoints live: the same
// namespace as its steps (kube.DefaultNamespaceTemplate).
const DefaultNamespaceTemplate = "atelier-{project}"

// Clients are what the activities talk to. Gateway may be nil: traffic is
// then split by replica ratio.
type Clients struct {
	Kube    kubernetes.Interface
	Gateway gatewayclient.Interface
}

// Resources are the kinds an endpoint is made of, over their typed
// clients: long-lived kinds, written with framework.Apply.
type Resources struct {
	Deployments framework.Typed[*appsv1.Deployment, *appsv1.DeploymentList]
	Services    framework.Typed[*corev1.Service, *corev1.ServiceList]
	// Routes is nil without a Gateway API client.
	Routes *framework.Typed[*gatewayv1.HTTPRoute, *gatewayv1.HTTPRouteList]
}

// NewResources returns the resources over c.
func NewResources(c Clients) Resources {
	r := Resources{
		Deployments: framework.NewTyped("Deployment", "deployment", func(ns string) framework.Client[*appsv1.Deployment, *appsv1.DeploymentList] {
			return c.Kube.AppsV1().Deployments(ns)
		}),
		Services: framework.NewTyped("Service", "service", func(ns string) framework.Client[*corev1.Service, *corev1.ServiceList] {
			return c.Kube.CoreV1().Services(ns)
		}),
	}
	if c.Gateway != nil {
		routes := framework.NewTyped("HTTPRoute", "httproute", func(ns string) framework.Client[*gatewayv1.HTTPRoute, *gatewayv1.HTTPRouteList] {
			return c.Gateway.GatewayV1().HTTPRoutes(ns)
		})
		r.Routes = &routes
	}
	return r
}

// Serving implements the serving activities for one cluster. It is safe
// for concurrent use.
type Serving struct {
	clients    Clients
	res        Resources
	nsTemplate string
	parents    []gatewayv1.ParentReference
	clock      clock.PassiveClock
	logger     *zap.Logger
	http       *http.Client
	quotas     Quotas
	// podPolicy holds the cluster's pod defaults, which revisions' pods
	// get too, and what pods may do.
	podPolicy framework.PodPolicy
	// fetchImage, fetchGateway and fetchBox fetch registered models into
	// revisions' pods (model.go).
	fetchImage, fetchGateway string
	fetchBox                 grant.Box
	secrets                  SecretResolver // project secrets of engines
	// routeRecheck is how long "the cluster does not serve HTTPRoutes" is
	// believed before discovery is asked again.
	routeRecheck time.Duration

	routesMu    sync.Mutex
	routesOK    bool
	routesAsked time.Time // zero: never asked

	namespaces sync.Map // namespace → struct{}: known to exist
	clusterIPs sync.Map // namespace/revision → cachedIP of its Service
}

// Option configures a Serving.
type Option func(*Serving)

// WithNamespaceTemplate sets where a project's endpoints go; "{project}" is
// replaced by the project's name (default "atelier-{project}"). Use the
// same template as the cluster's kube.Backend.
func WithNamespaceTemplate(t string) Option { return func(s *Serving) { s.nsTemplate = t } }

// WithGateway names the Gateway API Gateway(s) that endpoints' HTTPRoutes
// attach to. Without one, traffic is split by replica ratio even on a
// cluster serving HTTPRoutes: a route attached to no Gateway routes
// nothing, and claiming "gateway-api" for it would be a lie.
func WithGateway(parents ...gatewayv1.ParentReference) Option {
	return func(s *Serving) { s.parents = append(s.parents, parents...) }
}

// WithClock sets the clock of ObservedAt and scrape times and of the
// route discovery cache.
func WithClock(c clock.PassiveClock) Option { return func(s *Serving) { s.clock = c } }

// WithLogger sets the worker-side logger.
func WithLogger(l *zap.Logger) Option { return func(s *Serving) { s.logger = l } }

// WithPodPolicy gives revisions' pods the operator's pod defaults (a
// toleration of the GPU nodes, a priority class) where Atelier leaves
// them unset, and holds them to the cluster's policy: the same
// framework.PodPolicy as the cluster's step pods (--pod-defaults).
func WithPodPolicy(p framework.PodPolicy) Option { return func(s *Serving) { s.podPolicy = p } }

// WithHTTPClient sets the client of ScrapeMetrics (default: a plain client;
// each scrape has its own timeout).
func WithHTTPClient(c *http.Client) Option { return func(s *Serving) { s.http = c } }

// New returns the serving activities over clients. clients.Kube must not
// be nil.
func New(clients Clients, opts ...Option) *Serving {
	if clients.Kube == nil {
		panic("serving.New: nil Clients.Kube")
	}
	s := &Serving{
		clients:      clients,
		res:          NewResources(clients),
		nsTemplate:   DefaultNamespaceTemplate,
		clock:        clock.RealClock{},
		logger:       zap.NewNop(),
		http:         &http.Client{},
		routeRecheck: time.Minute,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Register registers the activities under their contract names, which
// workflow histories refer to.
func (s *Serving) Register(reg worker.ActivityRegistry) {
	for _, a := range []struct {
		f    any
		name string
	}{
		{s.ApplyRevision, activities.ApplyServingRevisionName},
		{s.ScaleRevision, activities.ScaleServingRevisionName},
		{s.ObserveRevision, activities.ObserveServingRevisionName},
		{s.DeleteRevision, activities.DeleteServingRevisionName},
		{s.ApplyTraffic, activities.ApplyServingTrafficName},
		{s.DeleteEndpoint, activities.DeleteServingEndpointName},
		{s.ScrapeMetrics, activities.ScrapeServingMetricsName},
	} {
		reg.RegisterActivityWithOptions(a.f, activity.RegisterOptions{Name: a.name})
	}
}

// namespace expands the template for project.
func (s *Serving) namespace(project string) (string, error) {
	ns, err := framework.Namespace(s.nsTemplate, project)
	if err != nil {
		return "", framework.Invalid("%v", err)
	}
	return ns, nil
}

// ensureNamespace creates ns if missing, once per Serving.
func (s *Serving) ensureNamespace(ctx context.Context, ns, project string) error {
	if _, ok := s.namespaces.Load(ns); ok {
		return nil
	}
	created, err := framework.EnsureNamespace(ctx, s.clients.Kube, ns, project)
	if err != nil {
		return err
	}
	if created {
		s.logger.Info("created namespace", zap.String("namespace", ns))
	}
	s.namespaces.Store(ns, struct{}{})
	return nil
}

// apply is framework.Apply, creating the namespace when it is missing
// (it may have been deleted since it was remembered).
func (s *Serving) apply(ctx context.Context, r framework.Updater, desired framework.Object, merge framework.Merge, project string) (framework.Object, bool, error) {
	ns := desired.GetNamespace()
	if err := s.ensureNamespace(ctx, ns, project); err != nil {
		return nil, false, err
	}
	obj, changed, err := framework.Apply(ctx, r, desired, merge)
	if errors.Is(err, framework.ErrMissingNamespace) {
		s.namespaces.Delete(ns)
		if err := s.ensureNamespace(ctx, ns, project); err != nil {
			return nil, false, err
		}
		obj, changed, err = framework.Apply(ctx, r, desired, merge)
	}
	return obj, changed, err
}

// checkRef validates the identity every request carries.
func checkRef(ref activities.ServingRevisionRef) error {
	if err := checkEndpoint(ref.Project, ref.Endpoint); err != nil {
		return err
	}
	if ref.Revision < 1 {
		return framework.Invalid("revision must be 1 or more, got %d", ref.Revision)
	}
	return nil
}

func checkEndpoint(project, endpoint string) error {
	switch {
	case project == "":
		return framework.Invalid("request has no project")
	case endpoint == "":
		return framework.Invalid("request has no endpoint")
	}
	return nil
}

// objectRef is "<kubectl resource>/<name>".
func objectRef(r framework.Resource, name string) string { return r.Short() + "/" + name }
