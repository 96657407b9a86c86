// Package benchstack assembles the embedded Atelier stack the benchmark
// programs under bench/ measure: a Temporal dev server of their own
// (devstack.StartTemporal: in-memory, headless, TunedDynamicConfig), a fresh
// Postgres database (devstack.EnsurePostgres, then CREATE DATABASE
// bench_<random>, dropped by Close), and, in-process, the real gateway
// (wire.InitGateway) and/or a worker.
//
// The worker is the real one (wire.InitWorker); a benchmark registers its
// own baseline workflows and activities on it through app.Worker.Registry,
// so baseline and subject share one worker.
package benchstack
