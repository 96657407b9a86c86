package tree

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CopyHashing copies and hashes every size exactly, whether it fits in a
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
			n, sum, err := CopyHashing(&dst, r)
			require.NoError(t, err, "%d %s", size, name)
			assert.Equal(t, int64(size), n, "%d %s", size, name)
			assert.Equal(t, want[:], sum, "%d %s", size, name)
			assert.True(t, bytes.Equal(src, dst.Bytes()), "%d %s: copied bytes", size, name)
		}
		n, sum, err := HashFile(bytes.NewReader(src))
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
		_, sum, err := CopyHashing(&failingWriter{after: after}, bytes.NewReader(src))
		assert.ErrorContains(t, err, "disk full", "write fails after %d", after)
		assert.Nil(t, sum)
	}
	for _, after := range []int64{10, chunkSize + 10, 4 * chunkSize} {
		r := io.MultiReader(io.LimitReader(bytes.NewReader(src), after), iotest.ErrReader(errors.New("connection reset")))
		_, sum, err := CopyHashing(io.Discard, r)
		assert.ErrorContains(t, err, "connection reset", "read fails after %d", after)
		assert.Nil(t, sum)
	}
}

// HashFileParts sums the whole and each part exactly, for parts that do
// and do not line up with its chunks, and sizes around their bounds.
func TestHashFileParts(t *testing.T) {
	for _, part := range []int{chunkSize, 2 * chunkSize, 100_000} {
		for _, size := range []int{0, 1, part - 1, part, part + 1, 3*part + 12345, 7 * chunkSize} {
			src := make([]byte, size)
			for i := range src {
				src[i] = byte(i * 7 / 3)
			}
			n, sum, parts, err := HashFileParts(iotest.HalfReader(bytes.NewReader(src)), int64(part))
			require.NoError(t, err)
			assert.Equal(t, int64(size), n)
			want := sha256.Sum256(src)
			assert.Equal(t, want[:], sum, "part %d size %d", part, size)
			var wantParts [][]byte
			for off := 0; off < size; off += part {
				s := sha256.Sum256(src[off:min(off+part, size)])
				wantParts = append(wantParts, s[:])
			}
			assert.Equal(t, wantParts, parts, "part %d size %d", part, size)
		}
	}
	r := io.MultiReader(bytes.NewReader(make([]byte, 3*chunkSize)), iotest.ErrReader(errors.New("I/O error")))
	_, sum, parts, err := HashFileParts(r, chunkSize)
	assert.ErrorContains(t, err, "I/O error")
	assert.Nil(t, sum)
	assert.Nil(t, parts)
}
