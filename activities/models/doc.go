// Package models holds the model registry's activities: moving an alias
// in the catalogue, telling a project's endpoints that an alias moved, and
// resolving an endpoint's model.ref to the version it names now
// (catalog.ResolveEndpointModel, the rule the gateway applies too).
//
// They run on a local worker's queue, next to the catalogue and the
// Temporal client; the workflow that strings the first two together is
// workflows/models.
package models
