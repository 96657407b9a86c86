// Package modelclient is the Temporal client side of the model registry:
// it moves an alias by running workflows/models' MoveAlias and waiting
// for its answer, so that the endpoints following the alias hear of the
// move even if the caller (the REST gateway) stops right after starting
// it.
package modelclient
