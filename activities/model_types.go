package activities

import (
	"github.com/atelier-ml/atelier/inference"
	"github.com/atelier-ml/atelier/runstate"
)

// Model registry contract: moving an alias is a workflow, so that the
// endpoints following the alias hear of the move even when the gateway
// that asked for it stops right after (a durable reaction, not a poll).
const (
	// MoveModelAliasWorkflowName moves (or removes) an alias in the
	// catalogue, then tells the project's endpoints.
	MoveModelAliasWorkflowName = "atelier.model.move-alias"
	// SetModelAliasName moves or removes the alias in the catalogue.
	SetModelAliasName = "atelier.model.set-alias"
	// NotifyModelMovedName signals SignalEndpointModelMoved to every open
	// endpoint of the project; an endpoint that does not follow the alias
	// ignores it.
	NotifyModelMovedName = "atelier.model.notify-endpoints"
	// ResolveEndpointModelName resolves an endpoint spec's model.ref to
	// the registry version it names now (catalog.ResolveEndpointModel).
	ResolveEndpointModelName = "atelier.endpoint.resolve-model"
	// SignalEndpointModelMoved carries a ModelMoved to an endpoint.
	SignalEndpointModelMoved = "atelier.endpoint.model-moved"
)

// MoveModelAliasInput moves Alias of Model to Version, or removes it when
// Version is nil, on behalf of Actor.
type MoveModelAliasInput struct {
	Project string `json:"project"`
	Model   string `json:"model"`
	Alias   string `json:"alias"`
	Version *int   `json:"version,omitempty"`
	// Artifact, instead of Version, names the version by its artifact
	// (a promote step's from): registered as the model's next version
	// first when it is not one yet.
	Artifact *runstate.Artifact `json:"artifact,omitempty"`
	Actor    string             `json:"actor"`
}

// MoveModelAliasResult says what the move did. NotFound names what was
// missing (the model, the version or, for a removal, the alias); nothing
// moved then.
type MoveModelAliasResult struct {
	Before *int `json:"before,omitempty"`
	// Version is what the alias names now (0 for a removal).
	Version  int    `json:"version,omitempty"`
	NotFound string `json:"notFound,omitempty"`
	// Notified is how many endpoints were told.
	Notified int `json:"notified"`
}

// ModelMoved says that an alias of a registered model moved (or was
// removed). The endpoint resolves the alias again rather than trusting a
// version carried here, so that moves heard out of order still end on
// the alias's last version.
type ModelMoved struct {
	Model string `json:"model"`
	Alias string `json:"alias"`
}

// NotifyModelMovedRequest is the argument of NotifyModelMovedName.
type NotifyModelMovedRequest struct {
	Project string     `json:"project"`
	Moved   ModelMoved `json:"moved"`
}

// ResolveEndpointModelRequest is the argument of ResolveEndpointModelName.
type ResolveEndpointModelRequest struct {
	Project string          `json:"project"`
	Model   inference.Model `json:"model"`
	// Endpoint is the endpoint that will serve the version: the
	// activity records its reference to the version (so that the
	// version cannot be deleted) before answering. Empty in requests
	// scheduled before it existed: the activity then reads the endpoint
	// from its workflow's ID.
	Endpoint string `json:"endpoint,omitempty"`
}

// ResolveEndpointModelResult is Model with Registered set to the version
// its Ref names now, or a Problem saying why there is none.
type ResolveEndpointModelResult struct {
	Model   inference.Model `json:"model"`
	Problem string          `json:"problem,omitempty"`
}
