// Package catalog holds the domain types of Atelier's catalogue (projects,
// tokens, pipelines, runs, logs) and its sentinel errors. The Postgres
// implementation lives in internal/store; consumers declare the small
// interfaces they need next to themselves.
package catalog
