package artifactstore

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"gocloud.dev/blob"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// copyHashing copies and hashes every size exactly, whether it fits in a
// chunk or is hashed behind the copy, with short reads too.
func TestCopyHashing(t *testing.T) {
	for _, size := range []int{0, 1, 4096, chunkSize - 1, chunkSize, chunkSize + 1, 7*chunkSize + 12345} {
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(i * 7 / 3)
		}
		want := sha256.Sum256(src)
		for name, r := range map[string]io.Reader{
			"whole": bytes.NewReader(src),
			"half":  iotest.HalfReader(bytes.NewReader(src)),
		} {
			var dst bytes.Buffer
			n, sum, err := copyHashing(&dst, r)
			require.NoError(t, err, "%d %s", size, name)
			assert.Equal(t, int64(size), n, "%d %s", size, name)
			assert.Equal(t, want[:], sum, "%d %s", size, name)
			assert.True(t, bytes.Equal(src, dst.Bytes()), "%d %s: copied bytes", size, name)
		}
		n, sum, err := hashFile(bytes.NewReader(src))
		require.NoError(t, err)
		assert.Equal(t, int64(size), n)
		assert.Equal(t, want[:], sum)
	}
}

type failingWriter struct{ after int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.after -= len(p); w.after < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// Read and write errors end the copy with the error (and no digest),
// wherever they happen.
func TestCopyHashingErrors(t *testing.T) {
	src := make([]byte, 5*chunkSize)
	for _, after := range []int{0, chunkSize, 3 * chunkSize} {
		_, sum, err := copyHashing(&failingWriter{after: after}, bytes.NewReader(src))
		assert.ErrorContains(t, err, "disk full", "write fails after %d", after)
		assert.Nil(t, sum)
	}
	for _, after := range []int64{10, chunkSize + 10, 4 * chunkSize} {
		r := io.MultiReader(io.LimitReader(bytes.NewReader(src), after), iotest.ErrReader(errors.New("connection reset")))
		_, sum, err := copyHashing(io.Discard, r)
		assert.ErrorContains(t, err, "connection reset", "read fails after %d", after)
		assert.Nil(t, sum)
	}
}

// S3 uploads: 5 MiB parts (S3's minimum) until 10,000 of them no longer
// hold the object, and as many in flight as 20 MiB of buffers allow (and a spare).
func TestWriterOptions(t *testing.T) {
	s := &Store{s3c: &s3.Client{}}
	for _, c := range []struct {
		size        int64
		part        int
		concurrency int
	}{
		{0, 5 << 20, 3},
		{1 << 30, 5 << 20, 3},
		{48 << 30, 5 << 20, 3},
		{49 << 30, 6 << 20, 2},
		{100 << 30, 11 << 20, 1},
		{5 << 40, 525 << 20, 1},
	} {
		o := s.writerOptions(c.size)
		assert.Equal(t, c.part, o.BufferSize, "part for %d", c.size)
		assert.Equal(t, c.concurrency, o.MaxConcurrency, "concurrency for %d", c.size)
		assert.LessOrEqual(t, (c.size+int64(o.BufferSize)-1)/int64(o.BufferSize), int64(s3MaxParts), "parts for %d", c.size)
	}
	assert.Equal(t, &blob.WriterOptions{}, (&Store{}).writerOptions(1<<30), "other stores keep their drivers' defaults")
}

// A directory's parallel uploads share uploadBudget: small files go many
// at a time, a large S3 upload alone, and none is too large to start.
func TestUploadBuffers(t *testing.T) {
	s3s := &Store{s3c: &s3.Client{}}
	own := int64(chunksInFlight * chunkSize)
	assert.Equal(t, own+4096, s3s.uploadBuffers(4096))
	assert.Equal(t, own+(5<<20)-1, s3s.uploadBuffers((5<<20)-1))
	assert.Equal(t, own+5*(5<<20), s3s.uploadBuffers(1<<30))
	assert.Greater(t, 2*s3s.uploadBuffers(1<<30), int64(uploadBudget), "two large uploads do not run at once")
	assert.Equal(t, int64(uploadBudget), s3s.uploadBuffers(1<<40))
	assert.Equal(t, own+(16<<20), (&Store{}).uploadBuffers(1<<30))
}
