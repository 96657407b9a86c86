package artifactstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/atelier-ml/atelier/internal/platform/artifactstore/tree"
)

func openFileStore(t *testing.T) (*Store, string) {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(context.Background(), "file://"+dir)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
}

// storedKeys lists the files of a file store (its objects).
func storedKeys(t *testing.T, dir string) []string {
	var keys []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".attrs") {
			rel, _ := filepath.Rel(dir, p)
			keys = append(keys, rel)
		}
		return err
	}))
	return keys
}

func TestFileRoundTripAndDedup(t *testing.T) {
	ctx := context.Background()
	s, storeDir := openFileStore(t)
	src := t.TempDir()
	write(t, filepath.Join(src, "model.bin"), "weights", 0o644)
	write(t, filepath.Join(src, "copy.bin"), "weights", 0o644)
	root, err := os.OpenRoot(src)
	require.NoError(t, err)
	defer root.Close()

	o, err := s.PutPath(ctx, "team-a", root, "model.bin")
	require.NoError(t, err)
	assert.Equal(t, int64(7), o.Size)
	assert.Equal(t, 0, o.Files)
	assert.True(t, strings.HasPrefix(o.Digest, "sha256:"))
	again, err := s.PutPath(ctx, "team-a", root, "copy.bin")
	require.NoError(t, err)
	assert.Equal(t, o, again, "the same bytes have the same digest")
	assert.Len(t, storedKeys(t, storeDir), 1, "the same bytes are stored once")

	dest := filepath.Join(t.TempDir(), "in")
	require.NoError(t, s.Get(ctx, "team-a", o, dest))
	b, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.Equal(t, "weights", string(b))

	// Another project's part of the store does not have it.
	err = s.Get(ctx, "team-b", o, filepath.Join(t.TempDir(), "x"))
	assert.ErrorIs(t, err, ErrNotFound)
}

func TestDirectoryRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := openFileStore(t)
	src := t.TempDir()
	write(t, filepath.Join(src, "data", "train", "a.csv"), "1,2\n", 0o644)
	write(t, filepath.Join(src, "data", "train", "b.csv"), "3,4\n", 0o644)
	write(t, filepath.Join(src, "data", "run.sh"), "#!/bin/sh\n", 0o755)
	root, err := os.OpenRoot(src)
	require.NoError(t, err)
	defer root.Close()

	o, err := s.PutPath(ctx, "p", root, "data")
	require.NoError(t, err)
	assert.Equal(t, 3, o.Files)
	assert.Equal(t, int64(4+4+10), o.Size)
	m, err := s.ReadManifest(ctx, "p", o.Digest)
	require.NoError(t, err)
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	assert.Equal(t, []string{"run.sh", "train/a.csv", "train/b.csv"}, paths)

	dest := filepath.Join(t.TempDir(), "data")
	require.NoError(t, s.Get(ctx, "p", o, dest))
	b, err := os.ReadFile(filepath.Join(dest, "train", "b.csv"))
	require.NoError(t, err)
	assert.Equal(t, "3,4\n", string(b))
	fi, err := os.Stat(filepath.Join(dest, "run.sh"))
	require.NoError(t, err)
	assert.NotZero(t, fi.Mode()&0o100, "the executable bit survives")
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(dest), ".*partial*"))
	assert.Empty(t, left, "no partial download is left")

	// The same directory elsewhere has the same digest.
	other := t.TempDir()
	write(t, filepath.Join(other, "train", "a.csv"), "1,2\n", 0o644)
	write(t, filepath.Join(other, "train", "b.csv"), "3,4\n", 0o644)
	write(t, filepath.Join(other, "run.sh"), "#!/bin/sh\n", 0o755)
	r2, err := os.OpenRoot(other)
	require.NoError(t, err)
	defer r2.Close()
	o2, err := s.PutPath(ctx, "p", r2, ".")
	require.NoError(t, err)
	assert.Equal(t, o.Digest, o2.Digest)
}

func TestLinksAndEscapesAreRefused(t *testing.T) {
	ctx := context.Background()
	s, storeDir := openFileStore(t)
	src := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	write(t, outside, "do not take", 0o644)
	write(t, filepath.Join(src, "dir", "ok.txt"), "ok", 0o644)
	require.NoError(t, os.Symlink(outside, filepath.Join(src, "dir", "link")))
	require.NoError(t, os.Symlink(outside, filepath.Join(src, "link")))
	root, err := os.OpenRoot(src)
	require.NoError(t, err)
	defer root.Close()

	_, err = s.PutPath(ctx, "p", root, "dir")
	assert.ErrorIs(t, err, ErrEscapes)
	assert.Contains(t, err.Error(), "dir/link is a symbolic link")
	_, err = s.PutPath(ctx, "p", root, "link")
	assert.ErrorIs(t, err, ErrEscapes)
	_, err = s.PutPath(ctx, "p", root, "../"+filepath.Base(filepath.Dir(outside))+"/secret")
	assert.Error(t, err, "a path out of the root is refused")
	for _, k := range storedKeys(t, storeDir) {
		b, _ := os.ReadFile(filepath.Join(storeDir, k))
		assert.NotEqual(t, "do not take", string(b))
	}
}

func TestChangedBytesAreNotStored(t *testing.T) {
	ctx := context.Background()
	s, storeDir := openFileStore(t)
	// The digest says one thing, the bytes another: the upload aborts.
	err := s.put(ctx, "p", tree.DigestOf(make([]byte, 32)), 5, strings.NewReader("hello"), "application/octet-stream", nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrMismatch)
	assert.Empty(t, storedKeys(t, storeDir), "nothing is left under a final key")
}

func TestBadDigestsAndProjects(t *testing.T) {
	s, _ := openFileStore(t)
	ctx := context.Background()
	for _, d := range []string{"", "md5:abc", "sha256:xyz", "sha256:" + strings.Repeat("0", 63)} {
		_, err := s.Exists(ctx, "p", d)
		assert.Error(t, err, d)
	}
	_, err := s.Exists(ctx, "../p", "sha256:"+strings.Repeat("0", 64))
	assert.Error(t, err)
	_, err = s.SignedURL(ctx, "p", "sha256:"+strings.Repeat("0", 64), 0)
	assert.True(t, errors.Is(err, ErrCannotSign), "a file store cannot sign: %v", err)
}

// Bytes stored long ago are written again when a new artifact has them,
// which renews their time: the collector's grace period then covers the
// new artifact until its lineage row exists.
func TestOldBytesAreRefreshedOnReuse(t *testing.T) {
	ctx := context.Background()
	s, storeDir := openFileStore(t)
	src := t.TempDir()
	write(t, filepath.Join(src, "m"), "weights", 0o644)
	root, err := os.OpenRoot(src)
	require.NoError(t, err)
	defer root.Close()
	o, err := s.PutPath(ctx, "p", root, "m")
	require.NoError(t, err)
	keys := storedKeys(t, storeDir)
	require.Len(t, keys, 1)
	old := time.Now().Add(-2 * RefreshAfter)
	require.NoError(t, os.Chtimes(filepath.Join(storeDir, keys[0]), old, old))
	_, err = s.PutPath(ctx, "p", root, "m")
	require.NoError(t, err)
	st, err := s.Stat(ctx, "p", o.Digest)
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), st.ModTime, time.Minute, "reused old bytes are renewed")
}
