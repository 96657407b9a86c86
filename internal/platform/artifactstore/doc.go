// Package artifactstore keeps step artifacts in an object store
// (gocloud.dev/blob: S3, GCS, Azure, or a directory) by content: a file is
// stored once under the sha256 of its bytes, a directory as a manifest
// (its files' paths, digests, sizes and modes) stored under the sha256 of
// the manifest, each file under its own digest. The same bytes are stored
// once per project, whichever step or run wrote them.
//
// Keys are "<project>/sha256/<hex>": a project's artifacts share nothing
// with another's, so no project can learn whether another holds some bytes.
//
// Nothing half-written ever sits under a final key: an object store makes
// an upload visible only when it completes (fileblob renames a temporary
// file), and an upload whose bytes do not hash to the digest computed
// before it is aborted. On S3 a file over one part goes by parts that the
// server checks against their sha256 from the hashing pass (parts.go), so
// its bytes are read twice but hashed once; other uploads hash again as
// they go. A multipart upload left behind by a worker that died is
// aborted by the collector (AbortStaleUploads). Downloads land in a
// temporary file or directory beside the destination, are checked against
// the digest, then renamed. Transfers stream (bounded memory whatever the
// size: on S3, a few hundred KiB for an upload by parts, about 25 MiB of
// buffers for one through the SDK's transfer manager, and the uploads of
// a directory share 32 MiB) and run in parallel for the files of a
// directory. Each copy hashes on a second goroutine, behind the bytes it
// moves. Figures: bench/artifacts, docs/benchmarks.md.
package artifactstore
