package tree

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// memObjects keeps objects in memory and checks their digests.
type memObjects struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (o *memObjects) Put(_ context.Context, digest string, size int64, r io.Reader, _ string) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if n, sum, _ := HashFile(bytes.NewReader(b)); DigestOf(sum) != digest || n != size {
		return io.ErrUnexpectedEOF
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.m[digest] = b
	return nil
}

func (o *memObjects) Open(_ context.Context, digest string) (io.ReadCloser, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, ok := o.m[digest]
	if !ok {
		return nil, ErrNotFound
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// A directory stored from a listing (a bucket's prefix) is the directory
// stored from a disk: same manifest, same digest, whatever order the
// listing has ("a.txt" lists before "a/b" in a bucket, after it in a walk).
func TestPutDirFromIsPut(t *testing.T) {
	files := map[string]string{"a/b": "one", "a.txt": "two", "c/d/e": "three", "z": ""}
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, "out", filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx := context.Background()
	disk := &memObjects{m: map[string][]byte{}}
	want, err := Put(ctx, disk, root, "out", 4)
	if err != nil {
		t.Fatal(err)
	}

	var opens int
	var mu sync.Mutex
	src := func(_ context.Context, name string) (io.ReadCloser, error) {
		mu.Lock()
		opens++
		mu.Unlock()
		rel, ok := strings.CutPrefix(name, "prefix/out/")
		if !ok {
			t.Errorf("opened %q, outside the directory", name)
		}
		// Not a seeker, as a stream without one: read twice.
		return io.NopCloser(strings.NewReader(files[rel])), nil
	}
	bucket := &memObjects{m: map[string][]byte{}}
	got, err := PutDirFrom(ctx, bucket, src, "prefix/out", []string{"a.txt", "z", "c/d/e", "a/b"}, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("from a listing %+v, from a disk %+v", got, want)
	}
	if opens != 2*len(files) {
		t.Errorf("%d opens for %d files: each is read to hash, then to store", opens, len(files))
	}
	m, err := ReadManifest(ctx, bucket, got.Digest)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range m.Files {
		if b, _ := bucket.Open(ctx, f.Digest); b == nil {
			t.Errorf("%s not stored", f.Path)
		}
	}

	if _, err := PutDirFrom(ctx, bucket, src, "prefix/out", []string{"../x"}, 2); err == nil {
		t.Error("a listed path leaving the directory was stored")
	}
	f, err := PutFileFrom(ctx, bucket, src, "prefix/out/a.txt")
	if err != nil || f.Files != 0 || f.Size != 3 {
		t.Fatalf("PutFileFrom = %+v, %v", f, err)
	}
}
