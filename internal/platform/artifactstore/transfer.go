package artifactstore

import (
	"context"
	"io"
	"os"

	"golang.org/x/sync/semaphore"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

// The shapes of stored artifacts are package tree's: it moves them, here
// over a bucket and in a step's pod over signed URLs.
type (
	// Object is what was stored: a file, or a directory of Files files.
	Object = tree.Object
	// Manifest lists a stored directory's files.
	Manifest = tree.Manifest
	// ManifestFile is one file of a stored directory.
	ManifestFile = tree.ManifestFile
)

// ManifestContentType marks a stored manifest.
const ManifestContentType = tree.ManifestContentType

// ErrEscapes is returned for an output that is, or holds, a symbolic
// link or anything but regular files and directories.
var ErrEscapes = tree.ErrEscapes

// projectObjects is one project's part of the store as tree.Objects. The
// uploads of one transfer share mem (uploadBudget).
type projectObjects struct {
	s       *Store
	project string
	mem     *semaphore.Weighted
}

func (o projectObjects) Put(ctx context.Context, digest string, size int64, r io.Reader, contentType string) error {
	return o.s.put(ctx, o.project, digest, size, r, contentType, o.mem)
}

func (o projectObjects) Open(ctx context.Context, digest string) (io.ReadCloser, error) {
	return o.s.reader(ctx, o.project, digest, hashedRead)
}

// Objects is the project's part of the store as tree.Objects.
func (s *Store) Objects(project string) tree.Objects {
	return projectObjects{s: s, project: project, mem: semaphore.NewWeighted(uploadBudget)}
}

// PutPath stores the file or directory at name inside root (tree.Put):
// the files of a directory go up DefaultParallel at a time, their buffers
// within uploadBudget.
func (s *Store) PutPath(ctx context.Context, project string, root *os.Root, name string) (Object, error) {
	return tree.Put(ctx, s.Objects(project), root, name, s.parallel)
}

// ReadManifest reads and checks a stored directory's manifest.
func (s *Store) ReadManifest(ctx context.Context, project, digest string) (Manifest, error) {
	return tree.ReadManifest(ctx, s.Objects(project), digest)
}

// Get materializes o at dest, which must not exist (tree.Get): complete
// or absent.
func (s *Store) Get(ctx context.Context, project string, o Object, dest string) error {
	return tree.Get(ctx, s.Objects(project), o, dest, s.parallel)
}
