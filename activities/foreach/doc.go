// Package foreach holds the activities of wide forEach steps
// (workflows/wide.go): writing finished items to Postgres in batches,
// taking a retried run's succeeded items, and rendering steps (and, a
// chunk at a time, forEach items) whose templates read a wide step's
// outputs, which live in Postgres rather than in any workflow's history;
// and assembling, for a step that reads a wide step's artifact, the
// directory of its items' artifacts (a manifest over the bytes they
// stored).
package foreach
