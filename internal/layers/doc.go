// Package layers writes down the floors of the tree and which way imports
// may point between them, and its test fails when an arrow turns back up.
// docs/architecture.md ("Layers") draws the same picture.
//
// From the bottom:
//
//	domain       schema, runstate, pipeline, gpu, inference,
//	             internal/platform (telemetry, fsperm, tokens)
//	contract     activities (the root package), internal/catalog
//	adapters     activities/*, client/*, internal/store, internal/vault,
//	             inference/proxy
//	workflows    workflows, workflows/*
//	edges        api, internal/services
//	composition  cmd, wire, internal/process
//
// A package may import its own floor and the floors below it, with two
// exceptions that keep workflow code replayable and the domain pure:
// workflow packages import only the domain and the contract (never an
// adapter: they reach the world through activities), and the domain
// imports only the domain. Beside the floors stand internal/stack (the dev
// stack and the tests' control planes: up to the adapters), examples (up
// to the workflows) and bench and integration (anything). Nothing but
// cmd, the tests and the benchmarks imports examples.
package layers
