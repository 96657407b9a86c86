package kube

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/atelier-ml/atelier/activities"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/jobs/job"
	"github.com/atelier-ml/atelier/activities/kube/jobs/raycluster"
	"github.com/atelier-ml/atelier/activities/kube/jobs/rayjob"
	"github.com/atelier-ml/atelier/activities/kube/jobs/sparkapp"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/staging"
)

// Defaults of the options.
const (
	DefaultNamespaceTemplate = "atelier-{project}"
	DefaultHeartbeatInterval = time.Second
	DefaultImagePullGrace    = 5 * time.Minute
)

// Clients are the typed clientsets of one cluster. It names
// framework.Clients, which the integrations build their kinds from, for
// the callers of New.
type Clients = framework.Clients

// Integrations are the step kinds a backend can run, in cleanup order:
// RayJobs go first, as their clusters and submitter Jobs go with them.
// Adding a kind is a package under jobs/ and a line here.
var Integrations = []framework.Integration{
	rayjob.Integration,
	sparkapp.Integration,
	job.Integration,
}

// Backend runs steps on one Kubernetes cluster. It is safe for concurrent
// use: one Backend serves every activity of a worker for its cluster, and
// its informers are shared by all of them.
type Backend struct {
	clients    Clients
	cluster    string
	nsTemplate string
	clock      clock.WithTicker
	logger     *zap.Logger
	heartbeat  time.Duration
	pullGrace  time.Duration
	mutate     func(framework.Object)
	progress   ProgressReporter
	kueueQueue string         // "" = Atelier's own GPU admission
	kueuePoll  time.Duration  // how often a suspended step re-reads its Kueue Workload
	secrets    SecretResolver // nil: steps cannot reference secrets
	logSink    LogSink        // nil: attempt logs are not copied
	logLimit   int64
	logNodes   sync.Map // node name → bool: its kubelet serves logs
	podPolicy  framework.PodPolicy
	launcher   Launcher       // how container steps reach artifacts (launch.go)
	artifacts  ArtifactReader // what launchers stored (nil: no store)
	// staging is where ray jobs' artifacts meet their pods (staging.go),
	// stagingArts the artifact store it copies from and to; nil: none.
	staging     *staging.Store
	stagingArts StagingArtifacts

	// Fixed in production; variables so tests need not wait on them.
	deleteWait  time.Duration // how long cancel/timeout waits for the object to vanish
	cleanupWait time.Duration // how long CleanupRunObjects waits for objects to vanish
	outputWait  time.Duration // how long success waits for the output pod to terminate

	kinds       map[activities.KubeKind]framework.Kind
	missing     map[activities.KubeKind]string // kinds this cluster lacks → what they require
	rayClusters *raycluster.Resource
	// cleanup holds every resource kind, in deletion order: RayJobs first,
	// as their clusters and submitter Jobs go with them.
	cleanup []framework.Resource

	informers *framework.Informers
	stop      context.CancelFunc

	namespaces sync.Map // namespace name → struct{}: known to exist
}

// Option configures a Backend.
type Option func(*Backend)

// WithNamespaceTemplate sets where a project's objects go; "{project}" is
// replaced by the project name (default "atelier-{project}"). The backend
// creates the namespace if it does not exist. A template without
// "{project}" puts every project in one namespace, and the backend then
// watches only that namespace (namespaced RBAC suffices); otherwise it
// watches all namespaces (see the package doc).
func WithNamespaceTemplate(t string) Option { return func(b *Backend) { b.nsTemplate = t } }

// WithClock sets the clock of the step loop: the StartedAt/FinishedAt
// timestamps used when an object's status records none, and every timer
// (attempt timeout, image-pull grace, heartbeats, output polling), so tests
// drive them with k8s.io/utils/clock/testing's FakeClock instead of
// sleeping. The waits bounded by contexts (deleting, cleanup) stay on real
// time: they guard against a slow API server, not against the step.
func WithClock(c clock.WithTicker) Option { return func(b *Backend) { b.clock = c } }

// WithLogger sets the worker-side logger.
func WithLogger(l *zap.Logger) Option { return func(b *Backend) { b.logger = l } }

// WithHeartbeatInterval sets how often a waiting activity heartbeats. It
// must be well below the activities' HeartbeatTimeout, which is what
// detects a dead worker.
func WithHeartbeatInterval(d time.Duration) Option { return func(b *Backend) { b.heartbeat = d } }

// WithImagePullGrace sets how long a step's pod may stay in ErrImagePull,
// ImagePullBackOff or CreateContainerConfigError before the step fails
// with that reason (default 5m): long enough for a slow registry or a
// Secret created a moment late, short enough that a typo in an image name
// does not hold a GPU node's slot until the step's timeout. ErrImageNeverPull
// and InvalidImageName fail the step at once (framework.PermanentReasons).
func WithImagePullGrace(d time.Duration) Option { return func(b *Backend) { b.pullGrace = d } }

// WithMutator sets a function called on every object the backend builds,
// after Atelier has set its fields and before it is created: the place for
// site policy such as tolerations, priority classes, service accounts
// (Spark drivers need one that may create executors) or image pull
// secrets. It receives a *batchv1.Job, *rayv1.RayJob, *rayv1.RayCluster or
// *sparkv1beta2.SparkApplication. It must be deterministic, and must not
// change names or atelier.dev/* labels.
func WithMutator(f func(obj framework.Object)) Option { return func(b *Backend) { b.mutate = f } }

// WithPodPolicy sets what projects' pods may do on this cluster (the
// default policy allows no host paths, host namespaces, privileged
// containers, and no service account but the namespace's default).
func WithPodPolicy(p framework.PodPolicy) Option { return func(b *Backend) { b.podPolicy = p } }

// WithKueue makes the backend submit Jobs and RayJobs (those that bring
// their own RayCluster) to Kueue: created suspended in the LocalQueue
// queue (label kueue.x-k8s.io/queue-name) of their namespace, they start
// when Kueue admits them, and while they wait the step shows Kueue's
// reason, read from the job's Workload. Atelier's own GPU admission is
// then off for this cluster (the cluster's capacity report says so);
// SparkApplications, which Kueue has no integration for, still go through
// it. Kueue must run on the cluster with that LocalQueue in every
// project's namespace.
func WithKueue(queue string) Option { return func(b *Backend) { b.kueueQueue = queue } }

// New returns a Backend for the cluster named cluster (used in logs and
// messages). clients.Kube must not be nil. Call Close when done, to stop
// its informers.
func New(clients Clients, cluster string, opts ...Option) *Backend {
	if clients.Kube == nil {
		panic("kube.New: nil Clients.Kube")
	}
	b := &Backend{
		clients:     clients,
		cluster:     cluster,
		nsTemplate:  DefaultNamespaceTemplate,
		clock:       clock.RealClock{},
		logger:      zap.NewNop(),
		heartbeat:   DefaultHeartbeatInterval,
		pullGrace:   DefaultImagePullGrace,
		deleteWait:  5 * time.Second,
		cleanupWait: 30 * time.Second,
		outputWait:  15 * time.Second,
		kueuePoll:   2 * time.Second,
		kinds:       map[activities.KubeKind]framework.Kind{},
		missing:     map[activities.KubeKind]string{},
		progress:    activities.SignalRun,
	}
	for _, o := range opts {
		o(b)
	}
	if b.heartbeat <= 0 {
		b.heartbeat = DefaultHeartbeatInterval
	}
	if b.pullGrace < 0 {
		b.pullGrace = 0
	}
	b.logger = b.logger.With(zap.String("cluster", cluster))

	for _, in := range Integrations {
		k, companions, ok := in.New(clients)
		if !ok {
			b.missing[in.StepKind] = in.Requires
			continue
		}
		b.kinds[in.StepKind] = k
		b.cleanup = append(b.cleanup, k)
		b.cleanup = append(b.cleanup, companions...)
		for _, c := range companions {
			if rc, ok := c.(*raycluster.Resource); ok {
				b.rayClusters = rc // what EnsureRayCluster creates
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	b.stop = cancel
	b.informers = framework.NewInformers(ctx, b.watchNamespace(), b.logger)
	if b.staging != nil {
		go b.sweepStaging(ctx)
	}
	return b
}

// watchNamespace is the informers' scope: the one namespace every project
// shares, or all namespaces.
func (b *Backend) watchNamespace() string {
	if strings.Contains(b.nsTemplate, "{project}") {
		return metav1.NamespaceAll
	}
	return b.nsTemplate
}

// Close stops the backend's informers. Activities still running fail
// (retryably) once their watch stops.
func (b *Backend) Close() { b.stop() }

// Watches lists the kinds whose shared informer runs ("Pod" included once
// a Job step ran): at most one watch each, however many steps wait.
func (b *Backend) Watches() []string { return b.informers.Started() }

// Register registers RunKubeStep, EnsureRayCluster and CleanupRunObjects
// under their contract names, which workflow histories refer to.
func (b *Backend) Register(reg worker.ActivityRegistry) {
	reg.RegisterActivityWithOptions(b.RunKubeStep, activity.RegisterOptions{Name: activities.RunKubeStepName})
	reg.RegisterActivityWithOptions(b.EnsureRayCluster, activity.RegisterOptions{Name: activities.EnsureRayClusterName})
	reg.RegisterActivityWithOptions(b.CleanupRunObjects, activity.RegisterOptions{Name: activities.CleanupRunObjectsName})
}

// Kind returns the integration for a step kind, or nil when this cluster
// has none.
func (b *Backend) Kind(k activities.KubeKind) framework.Kind { return b.kinds[k] }

// namespace expands the template for project.
func (b *Backend) namespace(project string) (string, error) {
	ns, err := framework.Namespace(b.nsTemplate, project)
	if err != nil {
		return "", framework.Invalid("%v", err)
	}
	return ns, nil
}

// ensureNamespace creates ns if it does not exist, once per backend. A
// worker whose RBAC cannot read namespaces is assumed to use pre-created
// ones: creating the object then reports any real problem.
func (b *Backend) ensureNamespace(ctx context.Context, ns, project string) error {
	if _, ok := b.namespaces.Load(ns); ok {
		return nil
	}
	created, err := framework.EnsureNamespace(ctx, b.clients.Kube, ns, project)
	if err != nil {
		return err
	}
	if created {
		b.logger.Info("created namespace", zap.String("namespace", ns))
	}
	b.namespaces.Store(ns, struct{}{})
	return nil
}

// Heartbeat is the activity heartbeat detail of a waiting activity: the
// object it waits for. A Temporal retry of the activity (the worker died)
// reads it to resume waiting for that very object.
type Heartbeat struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// previousHeartbeat returns the details of an earlier execution of this
// activity, if any.
func previousHeartbeat(ctx context.Context, logger *zap.Logger) (Heartbeat, bool) {
	if !activity.IsActivity(ctx) || !activity.HasHeartbeatDetails(ctx) {
		return Heartbeat{}, false
	}
	var hb Heartbeat
	if err := activity.GetHeartbeatDetails(ctx, &hb); err != nil || hb.Name == "" {
		logger.Warn("cannot decode previous heartbeat; creating or adopting by name", zap.Error(err))
		return Heartbeat{}, false
	}
	return hb, true
}

// heartbeater records hb every interval until stopped. Outside an activity
// (benchmarks, tools calling the methods directly) it does nothing.
type heartbeater struct{ stop, done chan struct{} }

func (b *Backend) startHeartbeat(ctx context.Context, hb Heartbeat) *heartbeater {
	h := &heartbeater{stop: make(chan struct{}), done: make(chan struct{})}
	if !activity.IsActivity(ctx) {
		close(h.done)
		return h
	}
	go func() {
		defer close(h.done)
		t := b.clock.NewTicker(b.heartbeat)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx, hb)
			select {
			case <-t.C():
			case <-h.stop:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return h
}

func (h *heartbeater) Stop() {
	select {
	case <-h.done:
		return
	default:
	}
	close(h.stop)
	<-h.done
}

// workerStop is closed when the worker begins to shut down (nil outside an
// activity).
func workerStop(ctx context.Context) <-chan struct{} {
	if !activity.IsActivity(ctx) {
		return nil
	}
	return activity.GetWorkerStopChannel(ctx)
}

// objectRef is "<kubectl resource>/<name>", as in KubeStepResult.Object.
func objectRef(r framework.Resource, name string) string { return r.Short() + "/" + name }
