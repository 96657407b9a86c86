package artifactstore

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	_ "gocloud.dev/blob/fileblob" // file:// artifact roots (make dev)
	_ "gocloud.dev/blob/memblob"  // mem:// for unit tests
	_ "gocloud.dev/blob/s3blob"   // s3:// artifact roots
	"gocloud.dev/gcerrors"
	"golang.org/x/sync/semaphore"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

// ErrNotFound is returned for a digest the project's store does not hold.
var ErrNotFound = tree.ErrNotFound

// ErrMismatch is returned by an upload whose bytes do not hash to their
// digest or are not their size (nothing is stored).
var ErrMismatch = errors.New("the bytes do not match their digest")

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
	s3c      *s3.Client // the bucket's client when it is S3's (s3blob)
	// s3Bucket and s3Prefix locate keys for presigning with s3c.
	s3Bucket, s3Prefix string
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
	st := &Store{b: b, parallel: DefaultParallel, now: time.Now}
	b.As(&st.s3c) // stays nil unless the bucket is S3's
	st.s3Bucket, st.s3Prefix = u.Host, u.Query().Get("prefix")
	return st, nil
}

// S3 uploads other than by parts (parts.go: files over s3PartSize) go
// through the AWS SDK's transfer manager, which reads the
// first MultipartUploadThreshold bytes of a body into memory (to choose
// between one PUT and a multipart upload), then keeps Concurrency+1
// buffers of a part. With gocloud's defaults (threshold 16 MiB, 8 MiB
// parts, 5 in flight) that is 16 + 6×8 MiB, ~80 MiB of RSS above the
// process's own per large upload (bench/artifacts), and, the size of a
// streamed body being unknown to it, at most 10,000 × 8 MiB = 80 GiB per
// object.
const (
	// s3MinPart is S3's smallest part (but the last).
	s3MinPart = 5 << 20
	// s3MaxParts is how many parts an S3 object may have.
	s3MaxParts = 10000
	// s3PartBuffers is the memory an upload's part buffers may hold.
	// With 25 MiB (4 parts in flight) a directory of large files peaked at
	// 65 MiB of RSS above the process's own on a loaded machine; with 20
	// MiB (3 in flight) lower, and no throughput lost on loopback, where
	// the server's CPU bounds uploads (bench/artifacts).
	s3PartBuffers = 20 << 20
)

// writerOptions are the options of an upload of size bytes. On S3: parts
// of 5 MiB (more for objects over ~48 GiB, so that any size fits in
// 10,000 parts), the multipart threshold at one part, and as many parts
// in flight as s3PartBuffers holds (3 of 5 MiB, and a spare; at least
// 1): an upload holds about 25 MiB of buffers whatever its size. The
// threshold is not a gocloud option: BeforeWrite replaces the writer's
// transfer manager by one configured here (gocloud exposes it for that),
// keeping the bucket's checksum setting as gocloud does. Other stores keep
// their drivers' defaults.
func (s *Store) writerOptions(size int64) *blob.WriterOptions {
	if s.s3c == nil {
		return &blob.WriterOptions{}
	}
	part, concurrency := s3Parts(size)
	return &blob.WriterOptions{
		BufferSize:     int(part),
		MaxConcurrency: concurrency,
		BeforeWrite: func(as func(any) bool) error {
			var tm *transfermanager.Client
			if as(&tm) {
				*tm = *transfermanager.New(s.s3c, func(o *transfermanager.Options) {
					o.RequestChecksumCalculation = s.s3c.Options().RequestChecksumCalculation
					o.PartSizeBytes = part
					o.MultipartUploadThreshold = part
					o.Concurrency = concurrency
				})
			}
			return nil
		},
	}
}

// s3Parts is the part size and the parts in flight of an S3 upload of
// size bytes (see writerOptions).
func s3Parts(size int64) (part int64, concurrency int) {
	part = max(int64(s3MinPart), (size+s3MaxParts-2)/(s3MaxParts-1))
	part = (part + 1<<20 - 1) &^ (1<<20 - 1) // whole MiB
	return part, max(1, int(s3PartBuffers/part)-1)
}

// uploadBudget bounds the buffers of the uploads of one directory that run
// at once (the files of a directory go up in parallel, DefaultParallel at
// a time: 16 large files would otherwise hold 16 uploads' buffers, ~400 MiB
// on S3; with gocloud's defaults, ~1 GiB). It holds one large S3 upload, or
// many small ones.
const uploadBudget = 32 << 20

// uploadBuffers is about what an upload of size bytes holds in memory:
// copyHashing's chunks, and on S3 what the transfer manager buffers (the
// whole body under one part; else the first part and Concurrency+1 part
// buffers). Other drivers buffer up to a chunk of their own (16 MiB for
// GCS's resumable uploads). At most uploadBudget, so that any upload can
// run.
func (s *Store) uploadBuffers(size int64) int64 {
	own := int64(tree.CopyBuffers)
	var driver int64
	switch part, concurrency := s3Parts(size); {
	case s.s3c == nil:
		driver = min(size, 16<<20)
	case size < part:
		driver = size
	default:
		driver = part * int64(concurrency+2)
	}
	return min(own+driver, uploadBudget)
}

// Close releases the store's bucket.
func (s *Store) Close() error { return s.b.Close() }

// redactURL keeps a URL's scheme, host and path for messages: query
// parameters may carry keys.
func redactURL(u *url.URL) string {
	return u.Scheme + "://" + u.Host + u.Path
}

// key is where a digest's bytes are in project's part of the store.
func key(project, digest string) (string, error) {
	hexd, err := tree.Hex(digest)
	if err != nil {
		return "", err
	}
	prefix, err := projectPrefix(project)
	return prefix + hexd, err
}

// projectPrefix is where project's objects are in the store.
func projectPrefix(project string) (string, error) {
	if project == "" || strings.ContainsAny(project, "/\x00") {
		return "", fmt.Errorf("%q cannot name a project's part of the store", project)
	}
	return project + "/sha256/", nil
}

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
	return s.reader(ctx, project, digest, nil)
}

func (s *Store) reader(ctx context.Context, project, digest string, opts *blob.ReaderOptions) (*blob.Reader, error) {
	k, err := key(project, digest)
	if err != nil {
		return nil, err
	}
	r, err := s.b.NewReader(ctx, k, opts)
	if gcerrors.Code(err) == gcerrors.NotFound {
		return nil, fmt.Errorf("%s: %w", digest, ErrNotFound)
	}
	return r, err
}

// hashedRead are the options of a read whose bytes the reader hashes
// against their digest (package tree's downloads): on S3 the SDK does not
// check a checksum of its own as well, which for an object stored with a
// sha256 (the launcher's signed uploads) would hash every byte twice, and
// does not log a warning for each object stored in parts (whose checksum
// it cannot check).
var hashedRead = &blob.ReaderOptions{BeforeRead: func(as func(any) bool) error {
	var opts *[]func(*s3.Options)
	if as(&opts) {
		*opts = append(*opts, func(o *s3.Options) {
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		})
	}
	return nil
}}

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

// SignedPut is how to upload an object without credentials: PUT to URL
// with Header, before expiry.
type SignedPut struct {
	URL    string
	Header map[string]string
}

// SignedPutURL is a URL that uploads size bytes under digest, scoped to
// that one object until expiry; ErrCannotSign when the store cannot sign
// uploads that it checks. On S3 the digest's sha256 is a signed header
// (x-amz-checksum-sha256): the server refuses bytes that do not hash to
// it, so what lands under a digest is those bytes whoever sends them.
func (s *Store) SignedPutURL(ctx context.Context, project, digest string, size int64, contentType string, expiry time.Duration) (SignedPut, error) {
	k, err := key(project, digest)
	if err != nil {
		return SignedPut{}, err
	}
	if s.s3c == nil {
		return SignedPut{}, ErrCannotSign
	}
	hexd, _ := tree.Hex(digest)
	raw, err := hex.DecodeString(hexd)
	if err != nil {
		return SignedPut{}, err
	}
	in := &s3.PutObjectInput{
		Bucket:            aws.String(s.s3Bucket),
		Key:               aws.String(s.s3Prefix + k),
		ContentLength:     aws.Int64(size),
		ContentType:       aws.String(contentType),
		ChecksumAlgorithm: s3types.ChecksumAlgorithmSha256,
		ChecksumSHA256:    aws.String(base64.StdEncoding.EncodeToString(raw)),
	}
	p, err := s3.NewPresignClient(s.s3c, s3.WithPresignExpires(expiry)).PresignPutObject(ctx, in)
	if err != nil {
		return SignedPut{}, err
	}
	h := map[string]string{}
	for name, vs := range p.SignedHeader {
		if len(vs) > 0 && !strings.EqualFold(name, "Host") && !strings.EqualFold(name, "Content-Length") {
			h[name] = vs[0]
		}
	}
	return SignedPut{URL: p.URL, Header: h}, nil
}

// PutVerified stores size bytes read from r under digest unless they are
// stored (recently) already; bytes that do not hash to digest are
// refused (ErrMismatch) and nothing is stored. It is for bytes from
// elsewhere (a step's launcher through the gateway): the upload holds its
// buffers' weight of mem while it runs, and a small body is read into
// memory first, so that stored bytes can be written again to renew them
// (refreshIfOld needs to read them twice).
func (s *Store) PutVerified(ctx context.Context, project, digest string, size int64, r io.Reader, contentType string, mem *semaphore.Weighted) error {
	if size < smallObject {
		b, err := io.ReadAll(io.LimitReader(r, size+1))
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	return s.put(ctx, project, digest, size, r, contentType, mem)
}

// Fresh reports whether digest is stored and young enough (RefreshAfter)
// for an upload of the same bytes to skip it.
func (s *Store) Fresh(ctx context.Context, project, digest string) (bool, error) {
	st, err := s.Stat(ctx, project, digest)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return s.now().Sub(st.ModTime) < RefreshAfter, nil
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
	prefix, err := projectPrefix(project)
	if err != nil {
		return err
	}
	it := s.b.List(&blob.ListOptions{Prefix: prefix})
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

// smallObject is the size under which put stores without looking first.
const smallObject = 1 << 20

// put stores the bytes r yields under digest unless they are there
// already. The upload is aborted (nothing stored) when the bytes do not
// hash to digest: the file changed after it was hashed. With mem, the
// upload holds its buffers' weight of it while it runs.
//
// An object under smallObject is written conditionally (IfNotExist) with
// no lookup first: one request instead of two (a directory of 10,000
// small files went from 0.84–0.90× of a plain parallel copy to above 1×,
// bench/artifacts), and sending a few bytes that turn out stored costs
// about what asking does. A store that ignores the condition
// overwrites the object with the same bytes. Larger objects are looked up
// first, so that stored bytes are never sent again.
func (s *Store) put(ctx context.Context, project, digest string, size int64, r io.Reader, contentType string, mem *semaphore.Weighted) error {
	k, err := key(project, digest)
	if err != nil {
		return err
	}
	conditional := size < smallObject
	if !conditional {
		if fresh, err := s.fresh(ctx, k, digest); err != nil || fresh {
			return err
		}
	}
	if mem != nil {
		w := s.uploadBuffers(size)
		if err := mem.Acquire(ctx, w); err != nil {
			return err
		}
		defer mem.Release(w)
	}
	err = s.write(ctx, k, digest, size, r, contentType, conditional)
	if conditional && gcerrors.Code(err) == gcerrors.FailedPrecondition {
		return s.refreshIfOld(ctx, k, digest, size, r, contentType)
	}
	return err
}

// fresh reports whether k holds digest's bytes, stored recently enough
// to be safe from collection (RefreshAfter).
func (s *Store) fresh(ctx context.Context, k, digest string) (bool, error) {
	attrs, err := s.b.Attributes(ctx, k)
	switch {
	case err == nil:
		return s.now().Sub(attrs.ModTime) < RefreshAfter, nil
	case gcerrors.Code(err) == gcerrors.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("check the store for %s: %w", digest, err)
}

// write uploads r under k, checking that its bytes hash to digest; the
// upload is aborted (nothing appears under k) when they do not. With
// conditional, an object already under k is a FailedPrecondition.
func (s *Store) write(ctx context.Context, k, digest string, size int64, r io.Reader, contentType string, conditional bool) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	opts := s.writerOptions(size)
	opts.ContentType = contentType
	opts.IfNotExist = conditional
	w, err := s.b.NewWriter(wctx, k, opts)
	if err != nil {
		return err
	}
	n, sum, err := tree.CopyHashing(w, r)
	if err == nil && (n != size || tree.DigestOf(sum) != digest) {
		err = fmt.Errorf("%w (%d bytes, expected %d with %s)", ErrMismatch, n, size, digest)
	}
	if err != nil {
		cancel() // aborts the write: nothing appears under k
		_ = w.Close()
		return err
	}
	return w.Close()
}

// refreshIfOld writes stored bytes again when they are older than
// RefreshAfter (see there): a conditional write found them stored
// without looking at their age. r must seek (a file, a manifest's bytes);
// one that does not is left as it is.
func (s *Store) refreshIfOld(ctx context.Context, k, digest string, size int64, r io.Reader, contentType string) error {
	attrs, err := s.b.Attributes(ctx, k)
	if err != nil || s.now().Sub(attrs.ModTime) < RefreshAfter {
		return err
	}
	seeker, ok := r.(io.Seeker)
	if !ok {
		return nil
	}
	if _, err := seeker.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return s.write(ctx, k, digest, size, r, contentType, false)
}
