// Package api is Atelier's REST gateway, spec-first: openapi.yaml generates
// (see gen/) the REST models, typed request objects and one response type
// per status code; the server implements gen.StrictServerInterface, one
// method per operation. Echo middlewares in front of it authenticate the
// bearer token (roles from the spec's x-atelier-role), buffer and limit
// the body and validate the request against the spec; the JSON body is
// then decoded by Bind (binder.go) into the generated request type. Errors
// leave as RFC 9457 problems through one echo error handler (problem.go);
// streams (SSE events, followed logs) are response types that write and
// flush as they go. Internal types (catalogue rows, workflow status) become
// REST types in one place, convert.go.
//
// The package depends on two consumer-side interfaces, Catalog (implemented
// by the Postgres store) and Engine (implemented by client/runclient), so its
// tests run against in-memory fakes.
//
// The step kinds a pipeline version may use are not configured: they follow
// the cluster registry (see ClusterLister), container and approval always,
// ray and spark once a Kubernetes cluster is registered.
//
// The web UI (package ui, built from api/ui/src) is served by webui.go at
// /ui/, from files embedded in the binary, without a token and under a
// strict Content-Security-Policy; the page is an ordinary client of this
// API with the user's bearer token. Pipeline versions carry their graph
// (spec.Dependencies) so that it draws the DAG the workflow schedules.
//
// Approving or rejecting an approval step (approvals.go) is a Temporal
// Update of the run's workflow; the workflow, which knows the step's rule,
// decides who may, and the gateway only passes the token's identity and
// role and maps the refusal to its problem.
package api
