// Package wire builds the atelier processes with google/wire: one injector
// per process (InitGateway, InitWorker, InitClusterWorker), each returning
// the process, a cleanup func and an error. wire_gen.go is generated (`make
// generate`) and committed; wire.go holds the injector declarations.
//
// Where a constructor goes: internal/process/app holds the processes (Gateway,
// Worker, ClusterWorker, RunDev) and the process-wide resources with a
// lifecycle of their own (logger, Temporal client, Kubernetes clients).
// providers.go holds only provideX functions that map config.Config onto
// another package's constructor and options, so no package below wire/
// and internal/process/app needs to know Config. Examples (the Go pipeline in
// examples/gopipeline) are registered only with --examples, which `atelier
// dev` turns on.
package wire
