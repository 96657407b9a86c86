// Package stepcache holds the step cache activities (activities.CacheLookupName,
// activities.CacheStoreName): thin adapters from the pipeline workflow to
// the project's cache entries in the catalogue. Workflows run them as
// local activities on the worker that runs the workflow task, so a lookup
// costs a Postgres query and a marker in history, not a round trip
// through a task queue. What the key covers, and why, is in
// workflows/cache.go and docs/api.md ("Step caching").
package stepcache
