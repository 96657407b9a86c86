package tree

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memParts is Objects in memory that store by parts files over part
// bytes, checking each part against its sum as a store does.
type memParts struct {
	mu      sync.Mutex
	part    int64
	objects map[string][]byte
	byParts int // PutParts calls
}

func (m *memParts) Put(_ context.Context, digest string, size int64, r io.Reader, _ string) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(b); int64(len(b)) != size || DigestOf(sum[:]) != digest {
		return io.ErrUnexpectedEOF
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[digest] = b
	return nil
}

func (m *memParts) Open(_ context.Context, digest string) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[digest]
	if !ok {
		return nil, ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (m *memParts) PartSize(int64) int64 { return m.part }

func (m *memParts) PutParts(_ context.Context, digest string, size int64, r io.ReaderAt, part int64, parts [][]byte, _ string) error {
	b := make([]byte, size)
	if _, err := r.ReadAt(b, 0); err != nil {
		return err
	}
	for i, want := range parts {
		got := sha256.Sum256(b[int64(i)*part : min(int64(i+1)*part, size)])
		if !bytes.Equal(got[:], want) {
			return io.ErrUnexpectedEOF
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.byParts++
	m.objects[digest] = b
	return nil
}

// Files over a part go up by parts, with their parts' sums; the others,
// and a directory's manifest, through Put. Both come back whole.
func TestPutByParts(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	large := bytes.Repeat([]byte("0123456789abcdef"), 5*chunkSize/16+3) // 5 chunks and 48 bytes
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d", "large.bin"), large, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "d", "small.txt"), []byte("small"), 0o644))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()

	objs := &memParts{part: 2 * chunkSize, objects: map[string][]byte{}}
	o, err := Put(ctx, objs, root, "d", 4)
	require.NoError(t, err)
	assert.Equal(t, 1, objs.byParts, "the large file by parts, the small one and the manifest through Put")
	assert.Len(t, objs.objects, 3)
	dest := filepath.Join(t.TempDir(), "d")
	require.NoError(t, Get(ctx, objs, o, dest, 4))
	got, err := os.ReadFile(filepath.Join(dest, "large.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(large, got))
}
