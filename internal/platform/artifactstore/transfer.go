package artifactstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// Manifest lists a stored directory's files in the order a walk of it
// visits them (lexical per directory). Its sha256
// (of the JSON Marshal writes) is the directory's digest, so two
// directories with the same files and modes have the same digest.
type Manifest struct {
	Files []ManifestFile `json:"files"`
}

// ManifestFile is one file of a stored directory.
type ManifestFile struct {
	Path       string `json:"path"` // slash-separated, relative to the directory
	Digest     string `json:"digest"`
	Size       int64  `json:"size"`
	Executable bool   `json:"executable,omitempty"`
}

// ManifestContentType marks a stored manifest.
const ManifestContentType = "application/vnd.atelier.manifest+json"

// ErrEscapes is returned for an output that is, or holds, a symbolic
// link or anything but regular files and directories.
var ErrEscapes = errors.New("artifacts hold regular files and directories only")

// PutPath stores the file or directory at name inside root (which it
// cannot leave: os.Root refuses paths and links that escape). Symbolic
// links, devices and sockets are refused; an empty directory is stored
// as an empty manifest.
func (s *Store) PutPath(ctx context.Context, project string, root *os.Root, name string) (Object, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return Object{}, err
	}
	switch {
	case fi.Mode().IsRegular():
		return s.putFile(ctx, project, root, name, nil)
	case fi.IsDir():
		return s.putDir(ctx, project, root, name)
	}
	return Object{}, fmt.Errorf("%s is a %s: %w", name, kindOf(fi.Mode()), ErrEscapes)
}

func kindOf(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// putFile hashes the file, then uploads it (unless the store holds those
// bytes already) checking they still hash the same.
func (s *Store) putFile(ctx context.Context, project string, root *os.Root, name string, mem *semaphore.Weighted) (Object, error) {
	f, err := root.Open(name)
	if err != nil {
		return Object{}, err
	}
	defer f.Close()
	n, sum, err := hashFile(f)
	if err != nil {
		return Object{}, fmt.Errorf("read %s: %w", name, err)
	}
	digest := digestOf(sum)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Object{}, err
	}
	if err := s.put(ctx, project, digest, n, f, "application/octet-stream", mem); err != nil {
		return Object{}, fmt.Errorf("store %s: %w", name, err)
	}
	return Object{Digest: digest, Size: n}, nil
}

func (s *Store) putDir(ctx context.Context, project string, root *os.Root, dir string) (Object, error) {
	var files []ManifestFile
	err := fs.WalkDir(root.FS(), dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s is a %s: %w", p, kindOf(d.Type()), ErrEscapes)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel := p
		if dir != "." {
			rel = p[len(dir)+1:]
		}
		files = append(files, ManifestFile{Path: rel, Executable: fi.Mode()&0o111 != 0})
		return nil
	})
	if err != nil {
		return Object{}, err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.parallel)
	// The uploads share a budget of buffers; hashing runs outside it.
	mem := semaphore.NewWeighted(uploadBudget)
	for i := range files {
		g.Go(func() error {
			o, err := s.putFile(gctx, project, root, path.Join(dir, files[i].Path), mem)
			files[i].Digest, files[i].Size = o.Digest, o.Size
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return Object{}, err
	}
	m := Manifest{Files: files}
	if m.Files == nil {
		m.Files = []ManifestFile{}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return Object{}, err
	}
	sum := sha256.Sum256(b)
	digest := digestOf(sum[:])
	if err := s.put(ctx, project, digest, int64(len(b)), bytes.NewReader(b), ManifestContentType, nil); err != nil {
		return Object{}, fmt.Errorf("store the manifest of %s: %w", dir, err)
	}
	var size int64
	for _, f := range files {
		size += f.Size
	}
	// Files is at least 1 for a directory so that 0 keeps meaning "a file".
	return Object{Digest: digest, Size: size, Files: max(len(files), 1)}, nil
}

// ReadManifest reads and checks a stored directory's manifest.
func (s *Store) ReadManifest(ctx context.Context, project, digest string) (Manifest, error) {
	r, err := s.Reader(ctx, project, digest)
	if err != nil {
		return Manifest{}, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, 512<<20))
	if err != nil {
		return Manifest{}, err
	}
	if sum := sha256.Sum256(b); digestOf(sum[:]) != digest {
		return Manifest{}, fmt.Errorf("the stored manifest of %s does not match its digest", digest)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("manifest %s: %w", digest, err)
	}
	for _, f := range m.Files {
		if !fs.ValidPath(f.Path) || f.Path == "." {
			return Manifest{}, fmt.Errorf("manifest %s names an invalid path %q", digest, f.Path)
		}
	}
	return m, nil
}

// Get materializes o at dest, which must not exist: a file, or a
// directory when o.Files > 0. It lands beside dest first and is renamed
// into place once every byte matched its digest, so dest is complete or
// absent.
func (s *Store) Get(ctx context.Context, project string, o Object, dest string) error {
	if o.Files == 0 {
		return s.getFile(ctx, project, o.Digest, dest, false)
	}
	m, err := s.ReadManifest(ctx, project, o.Digest)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp) // after a successful rename, there is nothing left
	dirs := map[string]bool{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.parallel)
	for _, f := range m.Files {
		target := filepath.Join(tmp, filepath.FromSlash(f.Path))
		parent := filepath.Dir(target)
		if !dirs[parent] {
			if err := os.MkdirAll(parent, 0o755); err != nil {
				return err
			}
			dirs[parent] = true
		}
		g.Go(func() error { return s.getFile(gctx, project, f.Digest, target, f.Executable) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return err
	}
	return os.Rename(tmp, dest)
}

// getFile downloads digest to dest through a temporary file beside it.
func (s *Store) getFile(ctx context.Context, project, digest, dest string, executable bool) error {
	r, err := s.Reader(ctx, project, digest)
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".partial-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, sum, err := copyHashing(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download %s: %w", digest, err)
	}
	if got := digestOf(sum); got != digest {
		return fmt.Errorf("downloaded bytes hash to %s, not %s", got, digest)
	}
	mode := os.FileMode(0o644)
	if executable {
		mode = 0o755
	}
	if err := os.Chmod(f.Name(), mode); err != nil {
		return err
	}
	return os.Rename(f.Name(), dest)
}
