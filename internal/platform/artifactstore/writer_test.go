package artifactstore

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/stretchr/testify/assert"
	"gocloud.dev/blob"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

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
	own := int64(tree.CopyBuffers)
	assert.Equal(t, own+4096, s3s.uploadBuffers(4096))
	assert.Equal(t, own+(5<<20)-1, s3s.uploadBuffers((5<<20)-1))
	assert.Equal(t, own+5*(5<<20), s3s.uploadBuffers(1<<30))
	assert.Greater(t, 2*s3s.uploadBuffers(1<<30), int64(uploadBudget), "two large uploads do not run at once")
	assert.Equal(t, int64(uploadBudget), s3s.uploadBuffers(1<<40))
	assert.Equal(t, own+(16<<20), (&Store{}).uploadBuffers(1<<30))
}

// Uploads by parts: 16 MiB parts until 10,000 of them no longer hold the
// object (then whole MiB that do); none but on S3.
func TestPartSize(t *testing.T) {
	s := &Store{s3c: &s3.Client{}}
	for _, c := range []struct{ size, part int64 }{
		{1 << 30, 16 << 20},
		{156 << 30, 16 << 20},
		{200 << 30, 21 << 20},
		{5 << 40, 525 << 20},
	} {
		part := s.partSize(c.size)
		assert.Equal(t, c.part, part, "part for %d", c.size)
		assert.LessOrEqual(t, (c.size+part-1)/part, int64(s3MaxParts), "parts for %d", c.size)
	}
	assert.Zero(t, (&Store{}).partSize(1<<30), "other stores upload through Put")
}
