// Package models holds the workflow that moves a registered model's
// alias: it records the move in the catalogue, then tells the project's
// endpoints (activities/models). Being a workflow, the telling happens
// even when the gateway that asked stops right after the move: an
// endpoint that follows the alias (model.follow) always hears of it and
// rolls out the version the alias names.
package models
