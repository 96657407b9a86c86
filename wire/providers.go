package wire

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"k8s.io/utils/ptr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/atelier-ml/atelier/activities/admission"
	"github.com/atelier-ml/atelier/activities/deploy"
	"github.com/atelier-ml/atelier/activities/foreach"
	"github.com/atelier-ml/atelier/activities/imports"
	"github.com/atelier-ml/atelier/activities/kube"
	"github.com/atelier-ml/atelier/activities/kube/framework"
	"github.com/atelier-ml/atelier/activities/kube/serving"
	"github.com/atelier-ml/atelier/activities/lineage"
	"github.com/atelier-ml/atelier/activities/local"
	"github.com/atelier-ml/atelier/activities/models"
	"github.com/atelier-ml/atelier/activities/placement"
	"github.com/atelier-ml/atelier/activities/stepcache"
	"github.com/atelier-ml/atelier/api"
	"github.com/atelier-ml/atelier/client/endpointclient"
	"github.com/atelier-ml/atelier/client/modelclient"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/inference/proxy"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore"
	"github.com/atelier-ml/atelier/internal/platform/artifactstore/staging"
	"github.com/atelier-ml/atelier/internal/platform/secretbox"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/process/app"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/services/modelrefs"
	"github.com/atelier-ml/atelier/internal/services/reconcile"
	"github.com/atelier-ml/atelier/internal/services/retention"
	"github.com/atelier-ml/atelier/internal/services/triggers"
	"github.com/atelier-ml/atelier/internal/services/webhooks"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/internal/vault"
	"github.com/atelier-ml/atelier/pipeline"
)

// provideStore opens the catalogue and brings its schema up to date. Both
// binaries migrate (goose holds an advisory lock), so whichever starts first
// on a fresh database is ready to serve.
func provideStore(ctx context.Context, cfg config.Config, box *secretbox.Box, l *zap.Logger) (*store.Store, func(), error) {
	s, err := store.Open(ctx, cfg.DatabaseURL, store.WithApplicationName("atelier"), store.WithSecretBox(box))
	if err != nil {
		return nil, nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, nil, err
	}
	return s, s.Close, nil
}

// provideGatewayTracing and provideWorkerTracing name the process in its
// traces; tracing is off unless the OpenTelemetry environment asks for it.
func provideGatewayTracing(ctx context.Context, m *telemetry.Metrics, l *zap.Logger) (*telemetry.Tracing, func(), error) {
	return app.NewTracing(ctx, telemetry.GatewayService, m, l)
}

func provideWorkerTracing(ctx context.Context, m *telemetry.Metrics, l *zap.Logger) (*telemetry.Tracing, func(), error) {
	return app.NewTracing(ctx, telemetry.WorkerService, m, l)
}

func provideEngine(c client.Client, cfg config.Config) *runclient.Client {
	return runclient.New(c, runclient.Config{Namespace: cfg.Namespace, UIBase: cfg.TemporalUIURL})
}

func provideAPI(cat api.Catalog, eng api.Engine, sc api.Schedules, wh api.Webhooks, v *vault.Vault, box *secretbox.Box, arts *artifactstore.Store, s *store.Store, c client.Client, rec *reconcile.Reconciler, cfg config.Config, m *telemetry.Metrics, tr *telemetry.Tracing, l *zap.Logger) (http.Handler, error) {
	endpoints := endpointclient.New(c, cfg.Namespace, cfg.TemporalUIURL)
	px, err := proxy.New(endpoints, endpoints, proxy.Options{Log: l.Named("proxy"), Metrics: m})
	if err != nil {
		return nil, err
	}
	opts := []api.Option{api.WithLogger(l.Named("api")), api.WithTaskQueue(cfg.TaskQueue), api.WithConverger(rec), api.WithStreamLimit(cfg.StreamLimit), api.WithTokenCacheTTL(cfg.TokenCacheTTL),
		api.WithSchedules(sc), api.WithWebhooks(wh, cfg.WebhookAllowPrivate), api.WithEndpoints(endpoints), api.WithRegistry(m.Registry), api.WithEndpointProxy(px), api.WithTracing(tr.TracerProvider())}
	if v != nil {
		opts = append(opts, api.WithSecrets(v))
	}
	var bytes api.ArtifactBytes // lineage is served without a store; downloads are 503
	if arts != nil {
		bytes = arts
	}
	if arts != nil && box != nil { // Kubernetes steps' launchers: grants are sealed with the secrets key
		opts = append(opts, api.WithLauncher(box, arts), api.WithLauncherLimit(cfg.ArtifactsProjectLimit, s))
	}
	opts = append(opts, api.WithArtifacts(s, bytes), api.WithModels(s, modelclient.New(c, cfg.TaskQueue)), api.WithTriggers(s))
	return api.New(cat, eng, opts...)
}

// provideReconciler keeps the catalogue converged with Temporal (runs ended
// outside Atelier); the gateway runs its sweeps.
func provideReconciler(s *store.Store, e *runclient.Client, cfg config.Config, l *zap.Logger) *reconcile.Reconciler {
	return reconcile.New(s, e, time.Now, l.Named("reconcile"), reconcile.Options{Namespace: cfg.Namespace})
}

// provideSweepers is the gateway's background upkeep: the reconciler, the
// retention sweep (which does nothing unless --retention is set), the
// webhook and trigger dispatchers, the sweep of expired step cache
// entries, the sweep of endpoints' references to model versions that no
// revision serves any more (internal/services/modelrefs) and, with an
// artifact store, the collector of unreferenced
// artifact bytes.
func provideSweepers(rec *reconcile.Reconciler, s *store.Store, eng *runclient.Client, c client.Client, arts *artifactstore.Store, cfg config.Config, l *zap.Logger) app.Sweepers {
	sw := app.Sweepers{rec, retention.New(s, time.Now, l.Named("retention"), retention.Options{MaxAge: cfg.Retention}),
		webhooks.New(s, time.Now, l.Named("webhooks"), webhooks.Options{
			AllowPrivate: cfg.WebhookAllowPrivate, Backoff: cfg.WebhookBackoff, MaxAttempts: cfg.WebhookMaxAttempts,
		}),
		triggers.New(s, eng, time.Now, l.Named("triggers"), triggers.Options{TaskQueue: cfg.TaskQueue}),
		retention.NewCacheSweeper(s, time.Now, l.Named("stepcache"), 0),
		modelrefs.New(s, endpointclient.New(c, cfg.Namespace, cfg.TemporalUIURL), time.Now, l.Named("modelrefs"), modelrefs.Options{})}
	if arts != nil {
		sw = append(sw, retention.NewArtifactCollector(s, arts, time.Now, l.Named("artifacts"), 0, 0))
	}
	return sw
}

// provideRunner builds the local runtime. It also makes the worker process
// non-dumpable, so steps cannot read its memory or environment through
// /proc, and refuses to start when the step user could not reach its work
// directories.
func provideRunner(logs local.LogSink, s *store.Store, v *vault.Vault, arts *artifactstore.Store, cfg config.Config, l *zap.Logger) (*local.Runner, error) {
	u, err := local.ParseStepUser(cfg.StepUser, os.Geteuid())
	if err != nil {
		return nil, err
	}
	if err := local.HardenWorker(); err != nil {
		return nil, err
	}
	gpus, err := localGPUs(cfg.LocalGPUs, l)
	if err != nil {
		return nil, err
	}
	opts := []local.Option{local.WithDataDir(cfg.DataDir), local.WithLogger(l.Named("local")), local.WithStepUser(u), local.WithGPUs(gpus),
		local.WithOrphanTimeout(cfg.LocalOrphanTimeout)}
	if v != nil {
		opts = append(opts, local.WithSecrets(v))
	}
	if arts != nil {
		opts = append(opts, local.WithArtifacts(arts), local.WithArtifactLimit(cfg.ArtifactsProjectLimit, s))
	}
	r := local.New(logs, opts...)
	if err := r.CheckDataDir(); err != nil {
		return nil, err
	}
	return r, nil
}

// provideLocalServing builds the local runtime's inference endpoints on
// the runner. A --local-engine naming an unknown backend stops the
// worker; one naming a missing file is only logged: endpoints that need
// that engine fail with the reason, the rest of the worker serves.
func provideLocalServing(r *local.Runner, cfg config.Config, l *zap.Logger) (*local.Serving, error) {
	engines, err := local.ParseEngines(cfg.LocalEngines)
	if err != nil {
		return nil, err
	}
	for b, path := range engines {
		if fi, err := os.Stat(path); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			l.Warn("local engine is not an executable file", zap.String("backend", string(b)), zap.String("path", path))
			continue
		}
		l.Info("local engine", zap.String("backend", string(b)), zap.String("path", path))
	}
	return local.NewServing(r, local.WithEngines(engines)), nil
}

// localGPUs finds the GPUs local steps may use. A machine without
// nvidia-smi (or whose driver fails) has none, which the log says: steps
// that ask for GPUs then fail with that reason. A --local-gpus naming a
// device the machine lacks stops the worker.
func localGPUs(setting string, l *zap.Logger) (*local.GPUSet, error) {
	if setting == "none" {
		l.Info("local GPUs: none (--local-gpus=none)")
		return local.NewGPUSet(nil, errors.New("the worker runs with --local-gpus=none")), nil
	}
	detected, err := local.DetectGPUs(context.Background(), "")
	if err != nil && setting != "" && setting != "auto" {
		return nil, fmt.Errorf("--local-gpus=%s: %w", setting, err)
	}
	if err != nil {
		l.Info("local GPUs: none", zap.Error(err))
		return local.NewGPUSet(nil, err), nil
	}
	gpus, err := local.SelectGPUs(setting, detected)
	if err != nil {
		return nil, err
	}
	for _, g := range gpus {
		l.Info("local GPU", zap.Int("index", g.Index), zap.String("product", g.Product), zap.Int64("memoryMiB", g.MemoryMiB))
	}
	if len(gpus) == 0 {
		return local.NewGPUSet(nil, errors.New("nvidia-smi lists no GPU")), nil
	}
	return local.NewGPUSet(gpus, nil), nil
}

// provideSelector builds the cluster-selection activity of the local
// worker, reading the registry in the catalogue.
func provideSelector(s *store.Store, l *zap.Logger) *placement.Selector {
	return placement.New(s, time.Now, l.Named("cluster"))
}

// provideAdmission builds the GPU admission activities of the local
// worker; the admission workflows they start run on its task queue.
func provideAdmission(s *store.Store, c client.Client, cfg config.Config) *admission.Activities {
	return admission.New(s, c, cfg.TaskQueue, admission.WithMinRuntime(cfg.GPUMinRuntime))
}

// provideStepCache builds the step cache activities of the local worker,
// over the catalogue.
func provideLineage(s *store.Store) *lineage.Activities { return lineage.New(s) }

// provideImports builds the import of URI inputs; a malformed
// --artifacts-import stops the worker.
func provideImports(arts *artifactstore.Store, s *store.Store, cfg config.Config) (*imports.Activities, error) {
	allow, err := imports.ParseAllow(cfg.ArtifactsImport)
	if err != nil {
		return nil, fmt.Errorf("ATELIER_ARTIFACTS_IMPORT: %w", err)
	}
	var bytes imports.Store
	if arts != nil {
		bytes = arts
	}
	return imports.New(bytes, s, allow, filepath.Join(cfg.DataDir, "imports")), nil
}

// provideForEach builds the wide forEach activities of the local worker,
// over the catalogue and the artifact store (nil when the installation has
// none: a fan-in of a wide step's artifacts then fails saying so).
func provideForEach(s *store.Store, arts *artifactstore.Store) *foreach.Activities {
	if arts == nil {
		return foreach.New(s, nil)
	}
	return foreach.New(s, arts)
}

// provideModels builds the model registry's activities of the local
// worker: alias moves, and telling endpoints that one moved.
func provideModels(s *store.Store, c client.Client, cfg config.Config) *models.Activities {
	return models.New(s, endpointclient.New(c, cfg.Namespace, cfg.TemporalUIURL))
}

func provideStepCache(s *store.Store) *stepcache.Activities {
	return stepcache.New(s, time.Now)
}

// provideDeploy builds the inference step activity of the local worker:
// the endpoint workflows it creates run on its task queue, and so do the
// activities of endpoints created without a cluster (the local runtime).
func provideDeploy(c client.Client, s *store.Store, cfg config.Config) *deploy.Activities {
	return deploy.New(endpointclient.New(c, cfg.Namespace, cfg.TemporalUIURL), s, cfg.TaskQueue, deploy.WithModels(s))
}

// provideServing builds the inference serving activities of a cluster
// worker, in the same namespaces as its steps, checking rollouts against
// the projects' GPU quotas from the catalogue.
func provideServing(clients kube.Clients, policy framework.PodPolicy, box *secretbox.Box, v *vault.Vault, cfg config.Config, st *store.Store, l *zap.Logger) *serving.Serving {
	opts := []serving.Option{serving.WithNamespaceTemplate(cfg.KubeNamespaceTemplate), serving.WithLogger(l.Named("serving")), serving.WithQuotas(st),
		serving.WithPodPolicy(policy)}
	if box != nil { // registered models reach revisions' pods as steps' artifacts do
		opts = append(opts, serving.WithModelFetch(cfg.LauncherImage, cfg.LauncherGatewayURL, box))
	}
	if v != nil {
		opts = append(opts, serving.WithSecrets(v))
	}
	if cfg.KubeGateway != "" {
		ns, name, found := strings.Cut(cfg.KubeGateway, "/")
		if !found {
			ns, name = "", cfg.KubeGateway
		}
		ref := gatewayv1.ParentReference{Name: gatewayv1.ObjectName(name)}
		if ns != "" {
			ref.Namespace = ptr.To(gatewayv1.Namespace(ns))
		}
		opts = append(opts, serving.WithGateway(ref))
	}
	return serving.New(serving.Clients{Kube: clients.Kube, Gateway: clients.Gateway}, opts...)
}

// providePodPolicy is what a cluster's pods may do and the operator's
// defaults for them (--pod-defaults), for step pods and endpoints'
// revisions alike. A bad file stops the worker, naming it.
func providePodPolicy(cfg config.Config) (framework.PodPolicy, error) {
	policy := framework.PodPolicy{ServiceAccounts: cfg.PodServiceAccounts}
	if cfg.PodDefaults != "" {
		b, err := os.ReadFile(cfg.PodDefaults)
		if err != nil {
			return policy, fmt.Errorf("--pod-defaults: %w", err)
		}
		if policy.Defaults, err = pipeline.ParsePodDefaults(b); err != nil {
			return policy, fmt.Errorf("--pod-defaults %s: %w", cfg.PodDefaults, err)
		}
	}
	return policy, nil
}

// provideKubeBackend builds the Kubernetes backends of a cluster worker;
// the cleanup stops their informers. Attempt logs go to the catalogue, as
// the local runtime's do.
func provideKubeBackend(ctx context.Context, clients kube.Clients, policy framework.PodPolicy, v *vault.Vault, box *secretbox.Box, arts *artifactstore.Store, st *store.Store, cfg config.Config, l *zap.Logger) (*kube.Backend, func(), error) {
	opts := []kube.Option{kube.WithNamespaceTemplate(cfg.KubeNamespaceTemplate), kube.WithLogger(l.Named("kube")), kube.WithKueue(cfg.KueueQueue),
		kube.WithPodPolicy(policy), kube.WithLogSink(st, 0)}
	if v != nil {
		opts = append(opts, kube.WithSecrets(v))
	}
	launcher := kube.Launcher{Image: cfg.LauncherImage, Gateway: cfg.LauncherGatewayURL}
	if box != nil {
		launcher.Box = box
	}
	opts = append(opts, kube.WithLauncher(launcher))
	if arts != nil {
		opts = append(opts, kube.WithArtifactReader(arts))
	}
	var sg *staging.Store
	if cfg.ArtifactsStagingURL != "" && arts != nil { // config.ValidateCluster: both URLs, and a store
		var err error
		if sg, err = staging.Open(ctx, cfg.ArtifactsStagingURL, cfg.ArtifactsStagingURI); err != nil {
			return nil, nil, fmt.Errorf("ATELIER_ARTIFACTS_STAGING_URL: %w", err)
		}
		opts = append(opts, kube.WithStaging(sg, arts))
	}
	b := kube.New(clients, cfg.Cluster, opts...)
	return b, func() {
		b.Close()
		if sg != nil {
			_ = sg.Close()
		}
	}, nil
}

// provideArtifactStore opens the object store of step artifacts when one
// is configured (nil otherwise: steps that declare artifacts fail saying
// so, and downloads are 503).
func provideArtifactStore(ctx context.Context, cfg config.Config) (*artifactstore.Store, func(), error) {
	if cfg.ArtifactsURL == "" {
		return nil, func() {}, nil
	}
	s, err := artifactstore.Open(ctx, cfg.ArtifactsURL)
	if err != nil {
		return nil, nil, fmt.Errorf("ATELIER_ARTIFACTS_URL: %w", err)
	}
	return s, func() { _ = s.Close() }, nil
}

// provideSecretBox opens the key that seals project secrets and webhook
// signing secrets, when one is configured (nil otherwise: secrets are off
// and webhook secrets stay as given).
func provideSecretBox(ctx context.Context, cfg config.Config) (*secretbox.Box, func(), error) {
	if cfg.SecretsKeyURL == "" {
		return nil, func() {}, nil
	}
	box, err := secretbox.Open(ctx, cfg.SecretsKeyURL, cfg.SecretsOldKeyURLs...)
	if err != nil {
		return nil, nil, fmt.Errorf("ATELIER_SECRETS_KEY_URL: %w", err)
	}
	return box, box.Close, nil
}

// provideVault is the project secrets vault when a key is configured (nil
// otherwise). It first brings what is stored to the current key: webhook
// and hook trigger signing secrets stored in clear are sealed, and with
// keys being rotated out the values they sealed are rewrapped, so those
// keys can be retired.
func provideVault(ctx context.Context, s *store.Store, box *secretbox.Box, cfg config.Config, l *zap.Logger) (*vault.Vault, error) {
	if box == nil {
		return nil, nil
	}
	v := vault.New(s, box)
	if len(cfg.SecretsOldKeyURLs) > 0 {
		n, err := v.Rotate(ctx)
		if err != nil {
			return nil, fmt.Errorf("rotating project secrets to the current key: %w", err)
		}
		l.Info("project secrets rewrapped with the current key", zap.Int("secrets", n), zap.String("key", box.KeyID()))
	}
	sealed, err := s.SealStoredSecrets(ctx)
	if err != nil {
		return nil, fmt.Errorf("sealing webhook and trigger secrets: %w", err)
	}
	for _, why := range sealed.Skipped {
		// Left as stored: deliveries (or hook requests) of that owner fail
		// until its secret is replaced or the key that sealed it is given
		// in ATELIER_SECRETS_OLD_KEY_URLS.
		l.Warn("a signing secret could not be sealed with the current key", zap.String("secret", why))
	}
	if sealed.Webhooks > 0 || sealed.Triggers > 0 {
		l.Info("signing secrets sealed with the current key", zap.Int("webhooks", sealed.Webhooks),
			zap.Int("triggers", sealed.Triggers), zap.String("key", box.KeyID()))
	}
	return v, nil
}
