// Package endpointclient is the Temporal client side of inference
// endpoints: it starts an endpoint's entity workflow
// (endpoint.Workflow), sends it updates (new spec, rollback,
// promote, abort, delete) and reads its status query, translating
// Temporal's errors into the ones the REST gateway answers with: not
// found, already exists, and a rejected update with its reason (and, for
// an invalid spec, every problem with its path). It is the only code
// outside the workflow that knows the workflow's names.
package endpointclient
