// Package tree moves files and directories to and from content-addressed
// objects: a file is stored under the sha256 of its bytes, a directory as a
// manifest (its files' paths, digests, sizes and modes) stored under the
// sha256 of the manifest, each file under its own digest.
//
// It knows nothing of where the objects are (Objects): the worker hands it
// a project's part of the artifact store (package artifactstore, over
// gocloud.dev/blob), and the launcher in a step's pod the signed URLs an
// attempt's grant obtains from the gateway (package launcher). Both get
// the same guarantees: uploads hash before they go and are refused when
// the bytes changed (by the store, which checks each part against its sum
// from the hashing pass where it can: PartsPutter); downloads land beside
// their destination, are checked against their digest and renamed into
// place, so a destination is complete or absent; a directory's files move
// in parallel; each copy hashes on a second goroutine, behind the bytes
// it moves.
//
// The package imports no object store client, so the launcher binary that
// uses it stays small.
package tree
