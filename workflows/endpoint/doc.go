// Package endpoint is the entity workflow of one inference endpoint
// (endpoint.Workflow, registered as activities.EndpointWorkflowName, ID
// activities.EndpointWorkflowID): it observes its revisions every tick,
// sizes them with the autoscaler and steps their rollouts (package
// inference), and is the only writer of their replicas and traffic.
// Updates change its spec, roll it back, promote, abort or delete it; the
// gateway's proxy signals the traffic it holds. Its client is package
// client/endpointclient; its messages are in package activities.
//
// Code here must stay deterministic; `make lint` runs workflowcheck over
// it.
package endpoint
