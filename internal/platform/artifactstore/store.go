package artifactstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// artifact roots (make dev)
	_ "gocloud.dev/blob/memblob"  // mem:// for unit tests
	_ "gocloud.dev/blob/s3blob"   // s3:// artifact roots
	"gocloud.dev/gcerrors"
)

// ErrNotFound is returned for a digest the project's store does not hold.
var ErrNotFound = errors.New("artifact not found in the store")

// ErrCannotSign is returned by SignedURL when the store cannot sign URLs
// (a directory store): the caller streams the bytes instead.
var ErrCannotSign = errors.New("this artifact store cannot sign URLs")

// DefaultParallel is how many files of a directory move at once.
const DefaultParallel = 16

// RefreshAfter is how old stored bytes may be for an upload of the same
// bytes to skip them. Older ones are written again, which renews their
// modification time: the collector of unreferenced bytes
// (internal/services/retention) spares anything younger than its grace
// period, so bytes a new artifact reuses cannot be collected between the
// upload's check and the artifact's record. The grace period must exceed
// RefreshAfter plus the time from an upload to its lineage row.
const RefreshAfter = time.Hour

// Store is a project-partitioned, content-addressed artifact store. It is
// safe for concurrent use.
type Store struct {
	b        *blob.Bucket
	parallel int
	now      func() time.Time
}

// Open opens the store at a gocloud.dev/blob URL: s3://bucket?region=..
// (credentials from the environment, as the AWS SDK reads them),
// file:///abs/dir, mem://. A file:// URL gets create_dir and no_tmp_dir
// (temporary files beside the final ones, so the final rename is atomic)
// unless it sets them.
func Open(ctx context.Context, rawURL string) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("artifact store URL: %w", err)
	}
	if u.Scheme == "file" {
		q := u.Query()
		for _, k := range []string{"create_dir", "no_tmp_dir"} {
			if q.Get(k) == "" {
				q.Set(k, "1")
			}
		}
		u.RawQuery = q.Encode()
	}
	b, err := blob.OpenBucket(ctx, u.String())
	if err != nil {
		return nil, fmt.Errorf("open artifact store %s: %w", redactURL(u), err)
	}
	return &Store{b: b, parallel: DefaultParallel, now: time.Now}, nil
}

// Close releases the store's bucket.
func (s *Store) Close() error { return s.b.Close() }

// redactURL keeps a URL's scheme, host and path for messages: query
// parameters may carry keys.
func redactURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}

// Object is what was stored: a file, or a directory of Files files.
type Object struct {
	Digest string // "sha256:<hex>": of the bytes, or of a directory's manifest
	Size   int64  // bytes; the sum of the files' for a directory
	Files  int    // 0 for a file
}

// key is where a digest's bytes are in project's part of the store.
func key(project, digest string) (string, error) {
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hexd) != 64 {
		return "", fmt.Errorf("%q is not a sha256 digest", digest)
	}
	if _, err := hex.DecodeString(hexd); err != nil {
		return "", fmt.Errorf("%q is not a sha256 digest", digest)
	}
	if project == "" || strings.ContainsAny(project, "/\x00") {
		return "", fmt.Errorf("%q cannot name a project's part of the store", project)
	}
	return project + "/sha256/" + hexd, nil
}

func digestOf(sum []byte) string { return "sha256:" + hex.EncodeToString(sum) }

// Exists reports whether the project's store holds digest.
func (s *Store) Exists(ctx context.Context, project, digest string) (bool, error) {
	k, err := key(project, digest)
	if err != nil {
		return false, err
	}
	return s.b.Exists(ctx, k)
}

// Reader opens digest's bytes (a file, or a directory's manifest) for
// streaming; it seeks, so http.ServeContent can answer Range requests.
func (s *Store) Reader(ctx context.Context, project, digest string) (*blob.Reader, error) {
	k, err := key(project, digest)
	if err != nil {
		return nil, err
	}
	r, err := s.b.NewReader(ctx, k, nil)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%s: %w", digest, ErrNotFound)
	}
	return r, err
}

// SignedURL is a URL that reads digest's bytes without credentials until
// expiry, scoped to that one object; ErrCannotSign when the store cannot.
func (s *Store) SignedURL(ctx context.Context, project, digest string, expiry time.Duration) (string, error) {
	k, err := key(project, digest)
	if err != nil {
		return "", err
	}
	u, err := s.b.SignedURL(ctx, k, &blob.SignedURLOptions{Expiry: expiry, Method: "GET"})
	if gcerrors.Code(err) == gcerrors.Unimplemented {
		return "", ErrCannotSign
	}
	return u, err
}

// Delete removes digest's bytes from the project's store (retention); a
// digest already gone is not an error.
func (s *Store) Delete(ctx context.Context, project, digest string) error {
	k, err := key(project, digest)
	if err != nil {
		return err
	}
	if err := s.b.Delete(ctx, k); err != nil && gcerrors.Code(err) != gcerrors.NotFound {
		return err
	}
	return nil
}

// Projects lists the projects that have bytes in the store.
func (s *Store) Projects(ctx context.Context) ([]string, error) {
	var out []string
	it := s.b.List(&blob.ListOptions{Delimiter: "/"})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if o.IsDir {
			out = append(out, strings.TrimSuffix(o.Key, "/"))
		}
	}
}

// Stat describes digest's object; ErrNotFound when there is none.
func (s *Store) Stat(ctx context.Context, project, digest string) (Stored, error) {
	k, err := key(project, digest)
	if err != nil {
		return Stored{}, err
	}
	a, err := s.b.Attributes(ctx, k)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return Stored{}, fmt.Errorf("%s: %w", digest, ErrNotFound)
	}
	if err != nil {
		return Stored{}, err
	}
	return Stored{Digest: digest, Size: a.Size, ModTime: a.ModTime}, nil
}

// Stored is one object of a project's part of the store.
type Stored struct {
	Digest  string
	Size    int64
	ModTime time.Time
}

// Walk calls fn for every object of the project's part of the store.
func (s *Store) Walk(ctx context.Context, project string, fn func(Stored) error) error {
	if project == "" || strings.ContainsAny(project, "/\x00") {
		return fmt.Errorf("%q cannot name a project's part of the store", project)
	}
	it := s.b.List(&blob.ListOptions{Prefix: project + "/sha256/"})
	for {
		o, err := it.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		hexd := path.Base(o.Key)
		if len(hexd) != 64 || o.IsDir {
			continue // not an object of ours (a temporary file of fileblob)
		}
		if err := fn(Stored{Digest: "sha256:" + hexd, Size: o.Size, ModTime: o.ModTime}); err != nil {
			return err
		}
	}
}

// put stores the bytes r yields under digest unless they are there
// already. The upload is aborted (nothing stored) when the bytes do not
// hash to digest: the file changed after it was hashed.
func (s *Store) put(ctx context.Context, project, digest string, size int64, r io.Reader, contentType string) error {
	k, err := key(project, digest)
	if err != nil {
		return err
	}
	attrs, err := s.b.Attributes(ctx, k)
	switch {
	case err == nil && s.now().Sub(attrs.ModTime) < RefreshAfter:
		return nil // stored, recently enough to be safe from collection
	case err != nil && gcerrors.Code(err) != gcerrors.NotFound:
		return fmt.Errorf("check the store for %s: %w", digest, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := s.b.NewWriter(wctx, k, &blob.WriterOptions{ContentType: contentType})
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(w, io.TeeReader(r, h))
	if err == nil && (n != size || digestOf(h.Sum(nil)) != digest) {
		err = fmt.Errorf("the bytes changed while they were stored (%d bytes, expected %d with %s)", n, size, digest)
	}
	if err != nil {
		cancel() // aborts the write: nothing appears under k
		_ = w.Close()
		return err
	}
	return w.Close()
}
