package artifactstore

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

// A file over one part goes to S3 as a multipart upload that the store
// drives itself rather than through gocloud's writer (the AWS transfer
// manager): tree.putFile hashes each part in the same read that hashes
// the whole file (tree.HashFileParts), and each part is sent with its
// sha256 as x-amz-checksum-sha256, a signed header the server checks the
// part against (as the launcher's signed uploads are checked). So:
//
//   - the bytes are not hashed again as they go: no second pass of our own,
//     no SigV4 payload hash (the payload is UNSIGNED-PAYLOAD: the signed
//     checksum header covers it, over plain HTTP too) and no CRC32 of the
//     SDK's;
//   - a part that changed since it was hashed is refused by the server, and
//     the upload is aborted: what completes under a digest is the bytes that
//     hash to it;
//   - a part streams from the file (io.SectionReader: the SDK can rewind it
//     to retry), so an upload holds no part buffers: memory no longer bounds
//     the part size or the parts in flight.
//
// 16 MiB × 4 in flight: 8–32 MiB parts and 2–8 in flight were within the
// noise of one another against versitygw on loopback (docs/benchmarks.md);
// larger parts than S3's 5 MiB minimum mean fewer requests.
const (
	// s3PartSize is the size of the parts (more above s3MaxParts × it).
	s3PartSize = 16 << 20
	// s3PartsInFlight is how many parts of one upload go at once.
	s3PartsInFlight = 4
	// s3PartsBuffers is about what an upload by parts holds: net/http's
	// buffers per connection.
	s3PartsBuffers = s3PartsInFlight * 64 << 10
)

// partSize is the part size of a multipart upload of size bytes by
// putParts; 0 when the store is not S3's.
func (s *Store) partSize(size int64) int64 {
	if s.s3c == nil {
		return 0
	}
	part := max(int64(s3PartSize), (size+s3MaxParts-1)/s3MaxParts)
	return (part + 1<<20 - 1) &^ (1<<20 - 1) // whole MiB
}

// PartSize implements tree.PartsPutter.
func (o projectObjects) PartSize(size int64) int64 { return o.s.partSize(size) }

// PutParts implements tree.PartsPutter.
func (o projectObjects) PutParts(ctx context.Context, digest string, size int64, r io.ReaderAt, partSize int64, parts [][]byte, contentType string) error {
	return o.s.putParts(ctx, o.project, digest, size, r, partSize, parts, contentType, o.mem)
}

var _ tree.PartsPutter = projectObjects{}

// putParts stores the size bytes of r under digest, unless they are
// stored (recently) already, as a multipart upload whose part i (the
// partSize bytes at i×partSize) the server checks against parts[i]. A
// part that does not match is an ErrMismatch and nothing is stored.
func (s *Store) putParts(ctx context.Context, project, digest string, size int64, r io.ReaderAt, partSize int64, parts [][]byte, contentType string, mem *semaphore.Weighted) error {
	k, err := key(project, digest)
	if err != nil {
		return err
	}
	switch {
	case s.s3c == nil:
		return errors.New("uploads by parts need an S3 store")
	case partSize <= 0 || int64(len(parts)) != (size+partSize-1)/partSize || len(parts) > s3MaxParts:
		return fmt.Errorf("%d part sums of %d bytes cannot describe %d bytes", len(parts), partSize, size)
	}
	fresh, err := s.fresh(ctx, k, digest)
	if err != nil || fresh {
		return err
	}
	if mem != nil {
		if err := mem.Acquire(ctx, s3PartsBuffers); err != nil {
			return err
		}
		defer mem.Release(s3PartsBuffers)
	}
	bucket, objKey := aws.String(s.s3Bucket), aws.String(s.s3Prefix+k)
	up, err := s.s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket:            bucket,
		Key:               objKey,
		ContentType:       aws.String(contentType),
		ChecksumAlgorithm: s3types.ChecksumAlgorithmSha256,
	})
	if err != nil {
		return fmt.Errorf("start the upload of %s: %w", digest, err)
	}
	done := make([]s3types.CompletedPart, len(parts))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s3PartsInFlight)
	for i, sum := range parts {
		off := int64(i) * partSize
		n := min(partSize, size-off)
		num := aws.Int32(int32(i + 1))
		g.Go(func() error {
			sum := base64.StdEncoding.EncodeToString(sum)
			out, err := s.s3c.UploadPart(gctx, &s3.UploadPartInput{
				Bucket:         bucket,
				Key:            objKey,
				UploadId:       up.UploadId,
				PartNumber:     num,
				Body:           io.NewSectionReader(r, off, n),
				ContentLength:  aws.Int64(n),
				ChecksumSHA256: aws.String(sum),
			}, s3.WithAPIOptions(v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware))
			if err != nil {
				return fmt.Errorf("part %d of %s: %w", i+1, digest, mismatch(err))
			}
			done[i] = s3types.CompletedPart{ETag: out.ETag, PartNumber: num, ChecksumSHA256: aws.String(sum)}
			return nil
		})
	}
	err = g.Wait()
	if err == nil {
		_, err = s.s3c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket:          bucket,
			Key:             objKey,
			UploadId:        up.UploadId,
			MultipartUpload: &s3types.CompletedMultipartUpload{Parts: done},
		})
		if err != nil {
			err = fmt.Errorf("complete the upload of %s: %w", digest, mismatch(err))
		}
	}
	if err != nil {
		// Nothing was stored under the key; the parts go too (even when ctx
		// is what ended the upload).
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = s.s3c.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: bucket, Key: objKey, UploadId: up.UploadId})
	}
	return err
}

// mismatch is err, marked ErrMismatch when the server refused bytes that
// do not match their checksum.
func mismatch(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "BadDigest", "InvalidDigest", "XAmzContentChecksumMismatch", "XAmzContentSHA256Mismatch":
			return fmt.Errorf("%w: %w", ErrMismatch, err)
		}
	}
	return err
}

// StaleUpload is how long ago a multipart upload must have started for
// AbortStaleUploads to abort it: far longer than any upload takes (a
// 5 TiB object at 100 MB/s takes 15 h), so that a live one is never cut.
const StaleUpload = 48 * time.Hour

// AbortStaleUploads aborts the project's S3 multipart uploads started
// before `before` and returns how many it aborted. A worker killed in the
// middle of an upload leaves one behind: invisible under any key (nothing
// half-stored), but its parts take space until it is aborted. Other
// stores leave nothing behind (fileblob's temporary files are removed by
// its writer, or by Walk's caller never seeing them) and abort nothing.
func (s *Store) AbortStaleUploads(ctx context.Context, project string, before time.Time) (int, error) {
	if s.s3c == nil {
		return 0, nil
	}
	prefix, err := projectPrefix(project)
	if err != nil {
		return 0, err
	}
	in := &s3.ListMultipartUploadsInput{Bucket: aws.String(s.s3Bucket), Prefix: aws.String(s.s3Prefix + prefix)}
	n := 0
	for {
		out, err := s.s3c.ListMultipartUploads(ctx, in)
		if err != nil {
			return n, fmt.Errorf("list the multipart uploads of %s: %w", project, err)
		}
		for _, u := range out.Uploads {
			if u.Initiated == nil || !u.Initiated.Before(before) {
				continue
			}
			_, err := s.s3c.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: in.Bucket, Key: u.Key, UploadId: u.UploadId})
			var nsu *s3types.NoSuchUpload
			if err != nil && !errors.As(err, &nsu) {
				return n, fmt.Errorf("abort the upload of %s: %w", aws.ToString(u.Key), err)
			}
			n++
		}
		if !aws.ToBool(out.IsTruncated) {
			return n, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}
