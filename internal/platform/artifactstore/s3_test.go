package artifactstore

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
	"github.com/atelier-ml/atelier/internal/stack/s3test"
)

// The store on a real S3 server (versitygw): a directory round trip,
// content dedup, a signed URL scoped to one object and expiring, and an
// aborted upload that leaves nothing behind.
func TestOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.URL("artifacts/"))
	require.NoError(t, err)
	defer s.Close()

	src := t.TempDir()
	write(t, filepath.Join(src, "d", "a.txt"), "alpha", 0o644)
	write(t, filepath.Join(src, "d", "sub", "b.txt"), "alpha", 0o644) // same bytes
	root, err := os.OpenRoot(src)
	require.NoError(t, err)
	defer root.Close()
	o, err := s.PutPath(ctx, "team-a", root, "d")
	require.NoError(t, err)
	assert.Equal(t, 2, o.Files)
	// Two files with the same bytes and the manifest: two objects.
	var objects []string
	require.NoError(t, filepath.WalkDir(filepath.Join(srv.Dir, srv.Bucket), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			objects = append(objects, p)
		}
		return err
	}))
	assert.Len(t, objects, 2, "%v", objects)
	for _, p := range objects {
		assert.Contains(t, p, filepath.Join("artifacts", "team-a", "sha256"), "keys are under the prefix and the project")
	}

	dest := filepath.Join(t.TempDir(), "d")
	require.NoError(t, s.Get(ctx, "team-a", o, dest))
	b, err := os.ReadFile(filepath.Join(dest, "sub", "b.txt"))
	require.NoError(t, err)
	assert.Equal(t, "alpha", string(b))

	m, err := s.ReadManifest(ctx, "team-a", o.Digest)
	require.NoError(t, err)
	u, err := s.SignedURL(ctx, "team-a", m.Files[0].Digest, time.Minute)
	require.NoError(t, err)
	res, err := http.Get(u)
	require.NoError(t, err)
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, 200, res.StatusCode)
	assert.Equal(t, "alpha", string(body))
	// The URL reads that object only.
	other := strings.Replace(u, strings.TrimPrefix(m.Files[0].Digest, "sha256:"), strings.TrimPrefix(o.Digest, "sha256:"), 1)
	res, err = http.Get(other)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 403, res.StatusCode, "a signed URL edited to another key is refused")
	// And expires.
	short, err := s.SignedURL(ctx, "team-a", m.Files[0].Digest, time.Second)
	require.NoError(t, err)
	time.Sleep(2100 * time.Millisecond)
	res, err = http.Get(short)
	require.NoError(t, err)
	res.Body.Close()
	assert.Equal(t, 403, res.StatusCode, "an expired signed URL is refused")

	// Bytes that do not match their digest are not stored.
	bad := tree.DigestOf(make([]byte, 32))
	require.Error(t, s.put(ctx, "team-a", bad, 5, strings.NewReader("hello"), "application/octet-stream", nil))
	ok, err := s.Exists(ctx, "team-a", bad)
	require.NoError(t, err)
	assert.False(t, ok, "an aborted upload leaves nothing under its key")
}

// A file over one part goes up as a multipart upload of s3PartSize parts,
// each checked by the server against its sha256 from the hashing pass,
// and comes back whole.
func TestLargeFileOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.URL("artifacts/"))
	require.NoError(t, err)
	defer s.Close()
	require.NotNil(t, s.s3c, "an s3:// store knows its S3 client")

	src := t.TempDir()
	want := make([]byte, 2*s3PartSize+1)
	_, _ = rand.Read(want)
	require.NoError(t, os.WriteFile(filepath.Join(src, "model.bin"), want, 0o644))
	root, err := os.OpenRoot(src)
	require.NoError(t, err)
	defer root.Close()
	o, err := s.PutPath(ctx, "team-a", root, "model.bin")
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), o.Size)

	k, err := key("team-a", o.Digest)
	require.NoError(t, err)
	head, err := s.s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("artifacts/" + k)})
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(aws.ToString(head.ETag), `-3"`), "three parts: ETag %s", aws.ToString(head.ETag))
	sums, err := s.s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String("artifacts/" + k), ChecksumMode: s3types.ChecksumModeEnabled})
	require.NoError(t, err)
	assert.Equal(t, s3types.ChecksumTypeComposite, sums.ChecksumType, "the server checked every part's sha256")
	assert.True(t, strings.HasSuffix(aws.ToString(sums.ChecksumSHA256), "-3"), "a sha256 of the parts' sha256: %s", aws.ToString(sums.ChecksumSHA256))

	dest := filepath.Join(t.TempDir(), "model.bin")
	require.NoError(t, s.Get(ctx, "team-a", o, dest))
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the bytes come back")
}

// A signed upload URL stores the bytes of its digest and nothing else:
// the server checks their sha256 (a signed header), the URL names one key,
// and the bytes land whole.
func TestSignedPutOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.URL("artifacts/"))
	require.NoError(t, err)
	defer s.Close()

	body := []byte("weights of the night run")
	sum := sha256.Sum256(body)
	digest := tree.DigestOf(sum[:])
	put := func(sp SignedPut, b []byte) int {
		req, err := http.NewRequest(http.MethodPut, sp.URL, bytes.NewReader(b))
		require.NoError(t, err)
		for k, v := range sp.Header {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		return res.StatusCode
	}
	sp, err := s.SignedPutURL(ctx, "team-a", digest, int64(len(body)), tree.FileContentType, time.Minute)
	require.NoError(t, err)

	forged := bytes.ToUpper(body) // same length, other bytes
	assert.GreaterOrEqual(t, put(sp, forged), 400, "bytes that do not hash to the digest are refused")
	ok, err := s.Exists(ctx, "team-a", digest)
	require.NoError(t, err)
	assert.False(t, ok, "nothing is stored under the digest")

	assert.Equal(t, http.StatusOK, put(sp, body))
	r, err := s.Reader(ctx, "team-a", digest)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	r.Close()
	require.NoError(t, err)
	assert.Equal(t, body, got)
	fresh, err := s.Fresh(ctx, "team-a", digest)
	require.NoError(t, err)
	assert.True(t, fresh)

	other := sp
	other.URL = strings.Replace(sp.URL, "team-a", "team-b", 1)
	assert.Equal(t, http.StatusForbidden, put(other, body), "the URL is signed for one key")

	_, err = (&Store{}).SignedPutURL(ctx, "team-a", digest, 1, tree.FileContentType, time.Minute)
	assert.ErrorIs(t, err, ErrCannotSign, "a store that is not S3 cannot sign uploads it checks")
}

// An upload by parts stores the bytes its part sums describe or nothing:
// a part that changed after it was hashed (here the second, one byte) is
// refused by the server, the upload is aborted (no parts left behind)
// and nothing appears under the digest.
func TestPartsChangedAfterHashingOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.URL("artifacts/"))
	require.NoError(t, err)
	defer s.Close()

	const part = 5 << 20 // S3's smallest
	hashed := make([]byte, 2*part+100)
	_, _ = rand.Read(hashed)
	n, sum, parts, err := tree.HashFileParts(bytes.NewReader(hashed), part)
	require.NoError(t, err)
	digest := tree.DigestOf(sum)
	sent := bytes.Clone(hashed)
	sent[part+7] ^= 1

	err = s.putParts(ctx, "team-a", digest, n, bytes.NewReader(sent), part, parts, tree.FileContentType, nil)
	require.ErrorIs(t, err, ErrMismatch)
	ok, err := s.Exists(ctx, "team-a", digest)
	require.NoError(t, err)
	assert.False(t, ok, "nothing is stored under the digest")
	ups, err := s.s3c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(srv.Bucket)})
	require.NoError(t, err)
	assert.Empty(t, ups.Uploads, "the upload was aborted")

	require.NoError(t, s.putParts(ctx, "team-a", digest, n, bytes.NewReader(hashed), part, parts, tree.FileContentType, nil))
	r, err := s.Reader(ctx, "team-a", digest)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	r.Close()
	require.NoError(t, err)
	assert.True(t, bytes.Equal(hashed, got), "the hashed bytes are stored")

	_, _, short, err := tree.HashFileParts(bytes.NewReader(hashed[:part]), part)
	require.NoError(t, err)
	assert.ErrorContains(t, s.putParts(ctx, "team-a", digest, n, bytes.NewReader(hashed), part, short, tree.FileContentType, nil),
		"cannot describe", "part sums that do not cover the size are refused before anything is sent")
}

// cancelAt is a ReaderAt that cancels its upload's context when a read
// reaches at: the worker going away in the middle of an upload.
type cancelAt struct {
	io.ReaderAt
	at     int64
	cancel context.CancelFunc
}

func (c cancelAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= c.at {
		c.cancel()
	}
	return c.ReaderAt.ReadAt(p, off)
}

// An upload cut short leaves nothing under its key: one whose context
// ends is aborted at once; one whose worker died (an upload started and
// never completed) is aborted by AbortStaleUploads once older than its
// bound, not before, and only in its project.
func TestStaleUploadsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.URL("artifacts/"))
	require.NoError(t, err)
	defer s.Close()
	uploads := func() []string {
		out, err := s.s3c.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(srv.Bucket)})
		require.NoError(t, err)
		var keys []string
		for _, u := range out.Uploads {
			keys = append(keys, aws.ToString(u.Key))
		}
		return keys
	}

	const part = 5 << 20
	data := make([]byte, 3*part)
	_, _ = rand.Read(data)
	n, sum, parts, err := tree.HashFileParts(bytes.NewReader(data), part)
	require.NoError(t, err)
	digest := tree.DigestOf(sum)
	cctx, cancel := context.WithCancel(ctx)
	err = s.putParts(cctx, "team-a", digest, n, cancelAt{bytes.NewReader(data), part, cancel}, part, parts, tree.FileContentType, nil)
	require.Error(t, err)
	assert.Empty(t, uploads(), "an upload whose context ended is aborted")
	ok, err := s.Exists(ctx, "team-a", digest)
	require.NoError(t, err)
	assert.False(t, ok)

	// Two uploads whose workers died, in two projects.
	for _, project := range []string{"team-a", "team-b"} {
		k, err := key(project, digest)
		require.NoError(t, err)
		up, err := s.s3c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(srv.Bucket), Key: aws.String("artifacts/" + k)})
		require.NoError(t, err)
		_, err = s.s3c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(srv.Bucket), Key: aws.String("artifacts/" + k), UploadId: up.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader(data[:part]), ContentLength: aws.Int64(part)})
		require.NoError(t, err)
	}
	aborted, err := s.AbortStaleUploads(ctx, "team-a", time.Now().Add(-time.Hour))
	require.NoError(t, err)
	assert.Zero(t, aborted, "younger than the bound: kept (it may be running)")
	assert.Len(t, uploads(), 2)
	aborted, err = s.AbortStaleUploads(ctx, "team-a", time.Now().Add(time.Minute))
	require.NoError(t, err)
	assert.Equal(t, 1, aborted)
	assert.Equal(t, []string{"artifacts/team-b/sha256/" + strings.TrimPrefix(digest, "sha256:")}, uploads(), "only the project's upload is aborted")
	ok, err = s.Exists(ctx, "team-a", digest)
	require.NoError(t, err)
	assert.False(t, ok, "nothing was ever stored under the key")

	aborted, err = (&Store{}).AbortStaleUploads(ctx, "team-a", time.Now())
	assert.NoError(t, err)
	assert.Zero(t, aborted, "other stores have no uploads to abort")
}

// Bytes that changed in the store are refused on download by the store's
// own digest check, the only one: the SDK does not hash an object stored
// with a sha256 (a launcher's signed upload) a second time.
func TestCorruptObjectOnS3(t *testing.T) {
	srv := s3test.Start(t)
	srv.Setenv(t)
	ctx := context.Background()
	s, err := Open(ctx, srv.URL("artifacts/"))
	require.NoError(t, err)
	defer s.Close()

	body := []byte("weights of the night run")
	sum := sha256.Sum256(body)
	digest := tree.DigestOf(sum[:])
	sp, err := s.SignedPutURL(ctx, "team-a", digest, int64(len(body)), tree.FileContentType, time.Minute)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPut, sp.URL, bytes.NewReader(body))
	require.NoError(t, err)
	for k, v := range sp.Header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)

	o := Object{Digest: digest, Size: int64(len(body))}
	require.NoError(t, s.Get(ctx, "team-a", o, filepath.Join(t.TempDir(), "ok")))
	k, err := key("team-a", digest)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(srv.Dir, srv.Bucket, "artifacts", filepath.FromSlash(k)), bytes.ToUpper(body), 0o644))
	dest := filepath.Join(t.TempDir(), "bad")
	err = s.Get(ctx, "team-a", o, dest)
	assert.ErrorContains(t, err, "downloaded bytes hash to", "the store's check, not the SDK's")
	assert.NoFileExists(t, dest)
}
