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
