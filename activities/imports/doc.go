// Package imports imports a step's inputs named by a URI
// (pipeline.ArtifactInput.URI) into the project's artifact store before
// the step runs, as the activity atelier.artifacts.import.
//
// A URI outside the store has no digest, no lineage and no place in a
// cache key until its bytes are stored by content; importing them first
// gives it all three, and the step then reads it like any other input
// (on the local runtime or through the launcher), without ever holding
// the source's credentials. The worker reads the source with its own
// identity, so what a project may import is the operator's decision: an
// allowlist of URI prefixes, each for every project or for one
// (--artifacts-import, Allow). Bytes land in a temporary directory of the
// worker's data dir, then go up through the same content-addressed upload
// as a step's outputs (artifactstore.PutPath): a directory (a URI ending
// in "/": every object under that prefix) becomes a manifest.
package imports
