//go:build wireinject

package wire

import (
	"context"

	"github.com/google/wire"

	"github.com/atelier-ml/atelier/activities/local"
	"github.com/atelier-ml/atelier/activities/mirror"
	"github.com/atelier-ml/atelier/activities/pipelines"
	"github.com/atelier-ml/atelier/api"
	"github.com/atelier-ml/atelier/client/runclient"
	"github.com/atelier-ml/atelier/internal/platform/telemetry"
	"github.com/atelier-ml/atelier/internal/process/app"
	"github.com/atelier-ml/atelier/internal/process/config"
	"github.com/atelier-ml/atelier/internal/store"
	"github.com/atelier-ml/atelier/workflows"
)

var common = wire.NewSet(app.NewLogger, provideSecretBox, provideArtifactStore, provideStore, app.NewTemporalClient)

// InitGateway builds the REST gateway process.
func InitGateway(ctx context.Context, cfg config.Config, m *telemetry.Metrics) (*app.Gateway, func(), error) {
	wire.Build(common, provideVault, provideGatewayTracing, provideEngine, provideReconciler, provideSweepers, provideAPI, app.NewGateway,
		wire.Bind(new(api.Catalog), new(*store.Store)),
		wire.Bind(new(api.Engine), new(*runclient.Client)),
		wire.Bind(new(api.Schedules), new(*runclient.Client)),
		wire.Bind(new(api.Webhooks), new(*store.Store)),
		wire.Bind(new(app.Sweeper), new(app.Sweepers)),
	)
	return nil, nil, nil
}

// InitWorker builds the worker process (local runtime) serving the native
// Go pipelines gos (the binary decides which: the examples only where
// asked, so the wiring never depends on examples/).
func InitWorker(ctx context.Context, cfg config.Config, m *telemetry.Metrics, gos []workflows.GoPipeline) (*app.Worker, func(), error) {
	wire.Build(common, provideVault, provideWorkerTracing, provideRunner, provideLocalServing, mirror.New, pipelines.New, provideSelector, provideAdmission, provideDeploy, provideStepCache, provideLineage, provideImports, provideModels, provideForEach, app.NewWorker,
		wire.Bind(new(local.LogSink), new(*store.Store)),
		wire.Bind(new(mirror.RunMirror), new(*store.Store)),
		wire.Bind(new(pipelines.VersionReader), new(*store.Store)),
		wire.Bind(new(app.GoWorkflowPublisher), new(*store.Store)),
	)
	return nil, nil, nil
}

// InitClusterWorker builds the worker of one Kubernetes cluster
// (cfg.Cluster): its clients, the Kubernetes backends and the registration
// and capacity reports.
func InitClusterWorker(ctx context.Context, cfg config.Config, m *telemetry.Metrics) (*app.ClusterWorker, func(), error) {
	wire.Build(common, provideVault, provideWorkerTracing, app.NewKubeRESTConfig, app.NewKubeClients, providePodPolicy, provideKubeBackend, provideServing, app.NewClusterWorker,
		wire.Bind(new(app.ClusterRegistry), new(*store.Store)),
	)
	return nil, nil, nil
}
